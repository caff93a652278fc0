/**
 * The worker thread of `TemplateWorker`: renders chat templates on request,
 * keeping each compiled template, and posts the text (or the error) back.
 */
import { Template } from "@huggingface/jinja";
import { parentPort } from "node:worker_threads";

const compiled = new Map<string, Template>();

parentPort?.on("message", (m: { id: number; source: string; context: Record<string, unknown> }) => {
  try {
    let t = compiled.get(m.source);
    if (!t) {
      t = new Template(m.source);
      compiled.set(m.source, t);
    }
    parentPort!.postMessage({ id: m.id, ok: true, text: t.render(m.context) });
  } catch (err) {
    parentPort!.postMessage({ id: m.id, ok: false, message: err instanceof Error ? err.message : String(err) });
  }
});
