/**
 * Worker thread of `renderBounded`: renders one chat template and posts the
 * text (or the error) back, then wakes the waiting thread.
 */
import { Template } from "@huggingface/jinja";
import { workerData, type MessagePort } from "node:worker_threads";
import type { RenderReply } from "./chat-template.js";

const { source, context, port, flag } = workerData as { source: string; context: Record<string, unknown>; port: MessagePort; flag: Int32Array };
let reply: RenderReply;
try {
  reply = { ok: true, text: new Template(source).render(context) };
} catch (err) {
  reply = { ok: false, message: err instanceof Error ? err.message : String(err) };
}
port.postMessage(reply);
Atomics.store(flag, 0, 1);
Atomics.notify(flag, 0);
