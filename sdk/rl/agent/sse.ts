/**
 * A completion as server-sent events, OpenAI's `stream: true` form, sent as
 * the engine samples: a first chunk with the role, content deltas as tokens
 * arrive, tool-call deltas (per call: its index, id, type and name, then its
 * arguments in pieces) once the reply is parsed, a last chunk with the
 * finish reason (and the logprobs, when asked), a usage chunk when
 * `stream_options.include_usage`, and `data: [DONE]`.
 *
 * Only text that is content for sure is sent early: a tool call that may be
 * starting (the parser says where, `contentSoFar`), a stop string that may
 * be completing, an end-of-turn token and a character still split across
 * tokens are held back until the reply is whole, so the deltas add up to
 * exactly the content a plain request returns. Headers go out with the
 * first chunk: an error before it is a plain JSON error with its status;
 * after it, an `error` event before `[DONE]`.
 */
import type { ServerResponse } from "node:http";
import type { Choice, Completion, TokenSink } from "./completions.js";
import type { EndpointError } from "./endpoint-error.js";
import { partialSuffix } from "./tool-parsers.js";

/** Characters per arguments delta. */
const PIECE = 16;

/** How a stream reads tokens and replies. */
export interface StreamReading {
  decode(ids: number[]): string;
  eosIds: readonly number[];
  /** Chars of a reply being written that are content for sure (the tool-call parser's; all of it without one). */
  contentSoFar(text: string): number;
  includeUsage: boolean;
  model: string;
}

interface ChoiceState {
  ids: number[];
  sent: number;
}

/** One streamed reply (see the file's header). */
export class SseReply implements TokenSink {
  private readonly choices = new Map<number, ChoiceState>();
  private forced = "";
  private stops: readonly string[] = [];
  private started = false;
  readonly id = `chatcmpl-${Math.random().toString(36).slice(2, 14)}`;
  readonly created = Math.floor(Date.now() / 1000);

  constructor(
    private readonly res: ServerResponse,
    private readonly r: StreamReading,
  ) {}

  begin(forced: string, stops: readonly string[]): void {
    this.forced = forced;
    this.stops = stops;
  }

  token(choice: number, id: number): void {
    const c = this.state(choice);
    if (this.r.eosIds.includes(id)) return;
    c.ids.push(id);
    let text = this.forced + this.r.decode(c.ids);
    // A character still split across tokens decodes as U+FFFD: wait for the rest.
    while (text.endsWith("\uFFFD")) text = text.slice(0, -1);
    let safe = Math.min(this.r.contentSoFar(text), text.length);
    for (const s of this.stops) {
      const at = text.indexOf(s);
      safe = Math.min(safe, at >= 0 ? at : text.length - partialSuffix(text, s));
    }
    if (safe > c.sent) {
      this.send({ index: choice, delta: { content: text.slice(c.sent, safe) }, logprobs: null, finish_reason: null });
      c.sent = safe;
    }
  }

  /** Sends what was held back, the tool calls, the finish, the usage and `[DONE]`. */
  finish(done: Completion): void {
    for (const ch of done.choices) this.finishChoice(ch);
    if (this.r.includeUsage) this.chunk({ choices: [], usage: done.usage });
    this.res.end("data: [DONE]\n\n");
  }

  /** An error: a plain JSON error when nothing was sent yet (false: the caller answers it), else an error event and the end. */
  fail(e: EndpointError): boolean {
    if (!this.started) return false;
    this.res.write(`data: ${JSON.stringify(e.body())}\n\n`);
    this.res.end("data: [DONE]\n\n");
    return true;
  }

  private finishChoice(ch: Choice): void {
    const c = this.state(ch.index);
    const content = ch.message.content ?? "";
    // The deltas sent are a prefix of the content by construction; what is left goes now.
    if (content.length > c.sent) this.send({ index: ch.index, delta: { content: content.slice(c.sent) }, logprobs: null, finish_reason: null });
    ch.message.tool_calls?.forEach((t, i) => {
      this.send({ index: ch.index, delta: { tool_calls: [{ index: i, id: t.id, type: "function", function: { name: t.function.name, arguments: "" } }] }, logprobs: null, finish_reason: null });
      for (let k = 0; k < t.function.arguments.length; k += PIECE) {
        this.send({ index: ch.index, delta: { tool_calls: [{ index: i, function: { arguments: t.function.arguments.slice(k, k + PIECE) } }] }, logprobs: null, finish_reason: null });
      }
    });
    this.send({ index: ch.index, delta: {}, logprobs: ch.logprobs, finish_reason: ch.finish_reason });
  }

  /** A choice's state; its first chunk (the role) goes out when it is first seen. */
  private state(choice: number): ChoiceState {
    let c = this.choices.get(choice);
    if (!c) {
      c = { ids: [], sent: 0 };
      this.choices.set(choice, c);
      this.send({ index: choice, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null });
    }
    return c;
  }

  private send(choice: Record<string, unknown>): void {
    this.chunk({ choices: [choice], ...(this.r.includeUsage ? { usage: null } : {}) });
  }

  private chunk(body: Record<string, unknown>): void {
    if (!this.started) {
      this.started = true;
      this.res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive" });
    }
    this.res.write(`data: ${JSON.stringify({ id: this.id, object: "chat.completion.chunk", created: this.created, model: this.r.model, system_fingerprint: "hearth", ...body })}\n\n`);
  }
}
