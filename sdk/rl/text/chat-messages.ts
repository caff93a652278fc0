/**
 * Chat messages and tools rendered by a model's own chat template (the Jinja
 * `chat_template` of its tokenizer_config.json), the way Hugging Face's
 * `apply_chat_template(messages, tools=…, add_generation_prompt=True)` does:
 * the context is `messages`, `tools`, `add_generation_prompt` and the
 * tokenizer's special tokens. OpenAI-shaped messages are normalised first
 * (`toTemplateMessages`): text parts joined, a tool call's `arguments` (a
 * JSON string on the wire) parsed into an object, since templates such as
 * Qwen2.5's render them with `tojson`.
 *
 * Two renderers: `renderChat` in-process, for templates hearth ships (its
 * warm starts render thousands of conversations), and `TemplateWorker`, a
 * long-lived worker thread with a deadline per rendering, for templates from
 * outside (a model folder's): one that loops for ever costs its request a
 * clear error and the worker a restart, never a hung executor.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { Template } from "@huggingface/jinja";
import { HearthError } from "../../errors/index.js";

/** A tool call as a template reads it: `arguments` an object. */
export interface TemplateToolCall {
  id?: string;
  type: "function";
  function: { name: string; arguments: Record<string, unknown> };
}

/** A message as a template reads it. */
export interface TemplateMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string;
  tool_calls?: TemplateToolCall[];
  tool_call_id?: string;
  name?: string;
  reasoning_content?: string;
}

/** A tool as OpenAI declares it (and as HF templates render it). */
export interface ToolSpec {
  type: "function";
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
}

/** The tokenizer's special tokens a template may read (bos_token, eos_token). */
export type SpecialTokens = Record<string, string>;

/** What renders one conversation. */
export interface ChatRender {
  messages: readonly TemplateMessage[];
  tools?: readonly ToolSpec[];
  /** End with the assistant's opening (default true). */
  addGenerationPrompt?: boolean;
  /** Extra template variables (e.g. Qwen3's `enable_thinking`). */
  extra?: Record<string, unknown>;
}

/** The Jinja context of a rendering. */
export function templateContext(r: ChatRender, special: SpecialTokens): Record<string, unknown> {
  return {
    ...special,
    ...r.extra,
    messages: r.messages,
    ...(r.tools && r.tools.length > 0 ? { tools: r.tools } : {}),
    add_generation_prompt: r.addGenerationPrompt ?? true,
  };
}

const compiled = new Map<string, Template>();

/** Renders in this thread (templates hearth ships; no deadline). */
export function renderChat(source: string, special: SpecialTokens, r: ChatRender): string {
  let t = compiled.get(source);
  if (!t) {
    t = new Template(source);
    compiled.set(source, t);
  }
  return t.render(templateContext(r, special));
}

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), "template-worker.js");

/** Default deadline of one rendering on the worker. */
export const RENDER_TIMEOUT_MS = 2_000;

interface Waiting {
  resolve: (text: string) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * A worker thread that renders chat templates, one request at a time in its
 * queue, each with a deadline: past it the worker is terminated (a runaway
 * template), every request waiting on it fails, and the next request starts
 * a fresh worker. `close()` ends it.
 */
export class TemplateWorker {
  private worker?: Worker;
  private next = 1;
  private readonly waiting = new Map<number, Waiting>();

  constructor(private readonly timeoutMs = RENDER_TIMEOUT_MS) {}

  /** Renders `r` with the template `source`. */
  render(source: string, special: SpecialTokens, r: ChatRender): Promise<string> {
    const w = this.started();
    const id = this.next++;
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.fail(new HearthError(`the chat template did not finish rendering within ${this.timeoutMs} ms (a runaway template?): fix chat_template in tokenizer_config.json`));
      }, this.timeoutMs);
      this.waiting.set(id, { resolve, reject, timer });
      w.postMessage({ id, source, context: templateContext(r, special) });
    });
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(WORKER);
    w.unref();
    w.on("message", (m: { id: number; ok: boolean; text?: string; message?: string }) => {
      const waiting = this.waiting.get(m.id);
      if (!waiting) return;
      this.waiting.delete(m.id);
      clearTimeout(waiting.timer);
      if (m.ok) waiting.resolve(m.text!);
      else waiting.reject(new HearthError(`the chat template failed to render: ${m.message} (fix chat_template in tokenizer_config.json, or the messages)`));
    });
    w.on("error", (err) => this.fail(new HearthError(`the chat template worker failed: ${err.message}`, { cause: err })));
    w.on("exit", () => {
      if (this.worker === w) this.worker = undefined;
    });
    this.worker = w;
    return w;
  }

  /** Fails everything waiting and drops the worker (the next render starts another). */
  private fail(err: Error): void {
    const w = this.worker;
    this.worker = undefined;
    for (const [id, waiting] of this.waiting) {
      clearTimeout(waiting.timer);
      waiting.reject(err);
      this.waiting.delete(id);
    }
    void w?.terminate();
  }

  /** Ends the worker; renders waiting on it fail. */
  async close(): Promise<void> {
    const w = this.worker;
    this.fail(new HearthError("the chat template worker was closed"));
    await w?.terminate();
  }
}
