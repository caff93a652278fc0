/**
 * A completion as server-sent events, OpenAI's `stream: true` form: a first
 * chunk with the role, content deltas, tool-call deltas (per call: its
 * index, id, type and name, then its arguments in pieces), a last chunk with
 * the finish reason, a usage chunk when `stream_options.include_usage`, and
 * `data: [DONE]`. Each choice streams in turn.
 */
import type { ServerResponse } from "node:http";
import type { Choice, Completion } from "./completions.js";

/** Characters per content or arguments delta when no per-token split is at hand. */
const PIECE = 16;

function pieces(text: string, tokens?: readonly string[]): string[] {
  if (tokens && tokens.join("") === text) return tokens.filter((t) => t !== "");
  const out: string[] = [];
  for (let i = 0; i < text.length; i += PIECE) out.push(text.slice(i, i + PIECE));
  return out;
}

/** The chunks of one choice's deltas. */
function choiceChunks(c: Choice): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, logprobs: unknown = null): void => {
    out.push({ index: c.index, delta, logprobs, finish_reason: finish });
  };
  chunk({ role: "assistant", content: "", refusal: null });
  const content = c.message.content ?? "";
  if (content !== "") {
    const tokens = c.logprobs?.content.map((t) => t.token);
    const parts = pieces(content, c.message.tool_calls ? undefined : tokens);
    // With logprobs and no tool calls, each delta is one token with its logprob entry.
    const byToken = tokens !== undefined && parts.length === c.logprobs!.content.filter((t) => t.token !== "").length && !c.message.tool_calls;
    const entries = c.logprobs?.content.filter((t) => t.token !== "");
    parts.forEach((p, i) => chunk({ content: p }, null, byToken ? { content: [entries![i]] } : null));
  }
  c.message.tool_calls?.forEach((t, i) => {
    chunk({ tool_calls: [{ index: i, id: t.id, type: "function", function: { name: t.function.name, arguments: "" } }] });
    for (const p of pieces(t.function.arguments)) chunk({ tool_calls: [{ index: i, function: { arguments: p } }] });
  });
  chunk({}, c.finish_reason);
  return out;
}

/** Writes `completion` to `res` as server-sent events (headers included). */
export function writeStream(res: ServerResponse, completion: Completion, includeUsage: boolean): void {
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", connection: "keep-alive" });
  const base = { id: completion.id, object: "chat.completion.chunk", created: completion.created, model: completion.model, system_fingerprint: completion.system_fingerprint };
  const send = (o: Record<string, unknown>): boolean => res.write(`data: ${JSON.stringify(o)}\n\n`);
  for (const c of completion.choices) {
    for (const choice of choiceChunks(c)) send({ ...base, choices: [choice], ...(includeUsage ? { usage: null } : {}) });
  }
  if (includeUsage) send({ ...base, choices: [], usage: completion.usage });
  res.end("data: [DONE]\n\n");
}
