/**
 * Chat templates (Jinja, from tokenizer_config.json) rendered through
 * @huggingface/jinja with a time bound. A template is data from outside: one
 * that loops for ever must be a clear error, not a hung executor. Rendering
 * runs on a worker thread that the caller waits on synchronously (Atomics)
 * for at most `timeoutMs`, then terminates.
 *
 * A prompt is rendered once with marker strings in place of the system and
 * user texts; when the markers come back verbatim (templates that insert
 * message content unchanged, as Qwen's and Llama's do), later prompts are
 * the skeleton with the texts spliced in, so no per-prompt rendering runs.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { MessageChannel, Worker, receiveMessageOnPort } from "node:worker_threads";
import { HearthError } from "../../errors/index.js";

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), "chat-template-worker.js");

/** Default bound on one rendering, worker start included. */
export const TEMPLATE_TIMEOUT_MS = 5_000;

/** What the worker posts back. */
export type RenderReply = { ok: true; text: string } | { ok: false; message: string };

/** Renders `source` with `context` on a worker thread, waiting at most `timeoutMs`. */
export function renderBounded(source: string, context: Record<string, unknown>, timeoutMs = TEMPLATE_TIMEOUT_MS): string {
  const flag = new Int32Array(new SharedArrayBuffer(4));
  const { port1, port2 } = new MessageChannel();
  const worker = new Worker(WORKER, { workerData: { source, context, port: port2, flag }, transferList: [port2] });
  try {
    const deadline = Date.now() + timeoutMs;
    while (Atomics.load(flag, 0) === 0) {
      const left = deadline - Date.now();
      if (left <= 0 || Atomics.wait(flag, 0, 0, left) === "timed-out") break;
    }
    const reply = receiveMessageOnPort(port1)?.message as RenderReply | undefined;
    if (!reply) {
      throw new HearthError(
        `the chat template did not finish rendering within ${timeoutMs} ms (a runaway template?): fix chat_template in tokenizer_config.json, or remove it to use plain-text prompts`,
      );
    }
    if (!reply.ok) throw new HearthError(`the chat template failed to render: ${reply.message} (fix chat_template in tokenizer_config.json)`);
    return reply.text;
  } finally {
    port1.close();
    void worker.terminate();
  }
}

const SYSTEM_MARK = "\u0001hearth-system\u0001";
const USER_MARK = "\u0001hearth-user\u0001";

/** A chat template compiled for system + user prompts that end where the assistant speaks. */
export class ChatPrompt {
  private constructor(
    private readonly source: string,
    private readonly extra: Record<string, unknown>,
    private readonly timeoutMs: number,
    /** [before system, between system and user, after user], when the template inserts content verbatim. */
    private readonly skeleton: [string, string, string] | null,
  ) {}

  /** Compiles `source` (one bounded rendering with markers). */
  static compile(source: string, extra: Record<string, unknown> = {}, timeoutMs = TEMPLATE_TIMEOUT_MS): ChatPrompt {
    const text = renderBounded(source, context(SYSTEM_MARK, USER_MARK, extra), timeoutMs);
    const s = text.indexOf(SYSTEM_MARK);
    const u = text.indexOf(USER_MARK);
    const once = s >= 0 && u > s && text.indexOf(SYSTEM_MARK, s + 1) < 0 && text.indexOf(USER_MARK, u + 1) < 0;
    const skeleton: [string, string, string] | null = once
      ? [text.slice(0, s), text.slice(s + SYSTEM_MARK.length, u), text.slice(u + USER_MARK.length)]
      : null;
    return new ChatPrompt(source, extra, timeoutMs, skeleton);
  }

  /** The prompt for one system + user turn. */
  render(system: string, user: string): string {
    if (this.skeleton) return `${this.skeleton[0]}${system}${this.skeleton[1]}${user}${this.skeleton[2]}`;
    return renderBounded(this.source, context(system, user, this.extra), this.timeoutMs);
  }
}

function context(system: string, user: string, extra: Record<string, unknown>): Record<string, unknown> {
  return {
    ...extra,
    messages: [
      { role: "system", content: system },
      { role: "user", content: user },
    ],
    add_generation_prompt: true,
  };
}
