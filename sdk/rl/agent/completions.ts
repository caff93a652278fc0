/**
 * One chat completion: render the messages and tools with the policy's chat
 * template, feed the prompt (continuing the episode session's tokens where
 * it extends them, session.ts), sample on the shared batched decode
 * (batcher.ts), parse tool calls in the template's format (tool-parsers.ts)
 * and answer in OpenAI's shape.
 *
 * Inside a training session the run decides the sampling: the run's
 * temperature and top-p and the session's row seed (so a session samples the
 * same tokens whichever executor, batch or path runs it; an agent's own
 * `temperature: 0` would make every group zero-variance), unless the run
 * honours the agent's settings. A session serves one request at a time, at
 * most `maxToolCalls + 1` of them, and at most `maxResponseTokens` tokens of
 * response in all; past a limit a request is answered at once with no
 * tokens and finish_reason "length" (the episode is cut, as on the
 * environment path). Requests with the run's key (no session) are served
 * the same way but recorded nowhere, their prompts encoded as a session
 * holding the same conversation would hold them (turn-encoding.ts).
 */
import { randomBytes, randomInt } from "node:crypto";
import { deriveSeed } from "../../tensor/seeds.js";
import type { TemplateMessage, TemplateWorker } from "../text/chat-messages.js";
import type { TextTokenizer } from "../text/tokenizer.js";
import type { DecodeBatcher, RowResult } from "./batcher.js";
import type { ChatRequest } from "./chat-request.js";
import { EndpointError, badRequest } from "./endpoint-error.js";
import type { AgentSession, Plan } from "./session.js";
import { checkCalls, type ParseFailure, type ToolCallParser } from "./tool-parsers.js";
import { encodeAsSession, type RenderMessages } from "./turn-encoding.js";

/** What a completion tells a streamed reply as it goes (sse.ts). */
export interface TokenSink {
  /** The reply's forced start (tool_choice) and stop strings, before any token. */
  begin(forced: string, stops: readonly string[]): void;
  /** Choice `choice` sampled `id`. */
  token(choice: number, id: number): void;
}

/** The run's limits on an episode session. */
export interface EpisodeLimitsOf {
  maxTurnTokens: number;
  maxResponseTokens: number;
  maxToolCalls: number;
  /** The model's context (max_position_embeddings). */
  maxPositions: number;
}

/** What a completion needs. */
export interface CompletionContext {
  model: string;
  tokenizer: TextTokenizer;
  templates: TemplateWorker;
  parser?: ToolCallParser;
  batcher: DecodeBatcher;
  limits: EpisodeLimitsOf;
  /** `honorAgent`: a session's requests sample with the agent's temperature and top-p instead of the session's (the run's). */
  sampling: { honorAgent: boolean };
  requestTimeoutMs: number;
  /** Parse failures of requests outside sessions (run-key requests), for the endpoint's status. */
  onParseFailure?: (f: ParseFailure) => void;
}

/** A token and its logprob as OpenAI's `logprobs.content` lists them. */
export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

/** One choice of a completion. */
export interface Choice {
  index: number;
  message: { role: "assistant"; content: string | null; refusal: null; tool_calls?: Array<{ id: string; type: "function"; function: { name: string; arguments: string } }> };
  logprobs: { content: TokenLogprob[] } | null;
  finish_reason: "stop" | "length" | "tool_calls";
}

/** Where a completion's time went besides the endpoint's own work: waiting for a batch, and the batch (ms; the slowest choice's). */
export interface CompletionTiming {
  queuedMs: number;
  engineMs: number;
}

/** A completion (OpenAI's `chat.completion` object). */
export interface Completion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: Choice[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  system_fingerprint: string;
  /** Not sent: the endpoint's own accounting. */
  timing?: CompletionTiming;
}

function newId(prefix: string): string {
  return `${prefix}${randomBytes(12).toString("base64url")}`;
}

/** The prompt text of a request: the template's rendering plus, for tool_choice required or named, the forced start of the reply; and how the request's messages render. */
async function promptOf(ctx: CompletionContext, req: ChatRequest): Promise<{ text: string; forced: string; render: RenderMessages }> {
  const template = ctx.tokenizer.template;
  if (!template) throw new EndpointError(400, "the policy's tokenizer has no chat template, so chat messages cannot be rendered: serve a model folder whose tokenizer_config.json has a chat_template", { code: "no_chat_template" });
  if (req.tools.length > 0 && !ctx.parser) throw badRequest("tools", "this model's chat template writes tool calls in no format hearth knows: start the run with --tool-parser NAME (or register one)");
  const render = async (messages: readonly TemplateMessage[], generation: boolean): Promise<string> => {
    try {
      return await ctx.templates.render(template.source, template.special, { messages, tools: req.tools, addGenerationPrompt: generation });
    } catch (err) {
      throw badRequest("messages", (err as Error).message);
    }
  };
  const text = await render(req.messages, true);
  const tc = req.toolChoice;
  const forced = ctx.parser && (tc === "required" || typeof tc === "object") ? ctx.parser.forcedPrefix(tc === "required" ? undefined : tc.name) : "";
  return { text: text + forced, forced, render };
}

/** The reply to one sampled row: content or tool calls, finish reason, logprobs. */
function choiceOf(ctx: CompletionContext, req: ChatRequest, index: number, forced: string, row: { tokens: ArrayLike<number>; logprobs: ArrayLike<number>; finishReason: string; stop: string | null; alternatives?: Array<{ ids: ArrayLike<number>; logprobs: ArrayLike<number> }> }, failures: ParseFailure[], calls: string[]): Choice {
  const tok = ctx.tokenizer;
  const ids = Array.from(row.tokens);
  // An end-of-turn id is the turn's end, not content; a stop string is cut from the content (OpenAI's behaviour).
  const shown = row.finishReason === "eos" ? ids.slice(0, -1) : ids;
  let text = forced + tok.decode(shown);
  if (row.finishReason === "stop" && row.stop) {
    const at = text.lastIndexOf(row.stop);
    if (at >= 0) text = text.slice(0, at);
  }
  let content: string | null = text;
  let toolCalls: Choice["message"]["tool_calls"];
  if (ctx.parser && req.tools.length > 0 && req.toolChoice !== "none") {
    const parsed = checkCalls(ctx.parser.parse(text), text, req.tools);
    failures.push(...parsed.failures);
    if (parsed.calls.length > 0) {
      content = parsed.content;
      toolCalls = parsed.calls.map((c) => ({ id: newId("call_"), type: "function", function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));
      for (const c of parsed.calls) calls.push(`${c.name}(${JSON.stringify(c.arguments)})`);
    }
  }
  const piece = (id: number): { token: string; bytes: number[] } => {
    const t = tok.decode([id]);
    return { token: t, bytes: [...Buffer.from(t, "utf8")] };
  };
  const logprobs = req.logprobs
    ? {
        content: ids.map((id, t) => ({
          ...piece(id),
          logprob: row.logprobs[t]!,
          top_logprobs: req.topLogprobs > 0 && row.alternatives?.[t]
            ? Array.from(row.alternatives[t]!.ids, (a, k) => ({ ...piece(a), logprob: row.alternatives![t]!.logprobs[k]! })).slice(0, req.topLogprobs)
            : [],
        })),
      }
    : null;
  const finish = toolCalls ? "tool_calls" : row.finishReason === "length" ? "length" : "stop";
  return { index, message: { role: "assistant", content, refusal: null, ...(toolCalls ? { tool_calls: toolCalls } : {}) }, logprobs, finish_reason: finish };
}

function completion(ctx: CompletionContext, choices: Choice[], promptTokens: number, completionTokens: number, rows: ReadonlyArray<{ queuedMs: number; engineMs: number }> = []): Completion {
  return {
    timing: { queuedMs: Math.max(0, ...rows.map((r) => r.queuedMs)), engineMs: Math.max(0, ...rows.map((r) => r.engineMs)) },
    id: newId("chatcmpl-"),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: ctx.model,
    choices,
    usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
    system_fingerprint: "hearth",
  };
}

function sampling(ctx: CompletionContext, req: ChatRequest, session?: AgentSession): { temperature: number; topP: number } {
  if (session && !ctx.sampling.honorAgent) return { temperature: session.spec.temperature, topP: session.spec.topP };
  return { temperature: req.temperature ?? 1, topP: req.topP ?? 1 };
}

/** A request on an episode session: continues or splits its tokens, records what it sampled. */
export async function completeInSession(ctx: CompletionContext, req: ChatRequest, session: AgentSession, signal?: AbortSignal, sink?: TokenSink): Promise<Completion> {
  if (req.n !== 1) throw badRequest("n", "a training session samples one choice per request (each episode is its own session)");
  if (session.busy) throw new EndpointError(409, `session ${session.id} is already serving a request: an episode asks one at a time`, { code: "session_busy" });
  session.busy = true;
  try {
    const { text, forced } = await promptOf(ctx, req);
    sink?.begin(forced, req.stop);
    const lim = ctx.limits;
    const cut = (): Completion => {
      session.stats.lengthCuts++;
      session.stats.requests++;
      const c = choiceOf(ctx, req, 0, "", { tokens: [], logprobs: [], finishReason: "length", stop: null }, [], []);
      c.message.content = "";
      session.transcript = [...req.messages, { role: "assistant", content: "" }];
      return completion(ctx, [c], 0, 0);
    };
    if (session.stats.requests >= lim.maxToolCalls + 1) return cut();
    const held = session.engineRow;
    const plan: Plan = session.plan(text, (t) => ctx.tokenizer.encode(t));
    if (plan.mismatch && held) ctx.batcher.drop(held.session);
    const continuing = plan.prefix.length > 0;
    const budget = lim.maxResponseTokens - session.responseTokens - (continuing ? plan.append.length : 0);
    if (budget <= 0) return cut();
    const total = plan.prefix.length + plan.append.length;
    if (total >= lim.maxPositions) throw badRequest("messages", `the prompt is ${total} tokens; the model's context is ${lim.maxPositions}`, "context_length_exceeded");
    const maxNew = Math.min(req.maxTokens ?? lim.maxTurnTokens, lim.maxTurnTokens, budget, lim.maxPositions - total);
    const s = sampling(ctx, req, session);
    const row = await ctx.batcher.submit({
      spec: { tokens: plan.from ? plan.append : [...plan.prefix, ...plan.append], from: plan.from, seed: session.spec.seed, maxNewTokens: maxNew, temperature: s.temperature, topP: s.topP, stop: req.stop, topLogprobs: req.logprobs ? req.topLogprobs : 0 },
      whole: plan.prefix,
      deadline: performance.now() + ctx.requestTimeoutMs,
      signal,
      tag: session.id,
      ...(sink ? { onToken: (id: number) => sink.token(0, id) } : {}),
    });
    if (session.ended) {
      // The episode ended (its agent's deadline, the lease) while this request ran: nothing is recorded.
      ctx.batcher.drop(row.session);
      throw new EndpointError(404, `session ${session.id} has ended`, { code: "session_ended" });
    }
    const previous = session.engineRow;
    session.commit(plan, { tokens: row.tokens, logprobs: row.logprobs, digest: row.digest, text: ctx.tokenizer.decode(row.tokens) }, { session: row.session, row: row.row });
    if (previous) ctx.batcher.drop(previous.session);
    session.stats.requests++;
    const failures: ParseFailure[] = [];
    const calls: string[] = [];
    const choice = choiceOf(ctx, req, 0, forced, row, failures, calls);
    session.stats.parseFailures.push(...failures);
    session.stats.toolCalls += calls.length;
    session.current!.calls.push(...calls);
    session.transcript = [...req.messages, assistantMessage(choice)];
    return completion(ctx, [choice], total, row.tokens.length, [row]);
  } finally {
    session.busy = false;
  }
}

/** A request with the run's key: encoded as a session would hold it, served on the same batches, recorded nowhere; `n` choices from seeds of `seed` (else random). */
export async function completeUnrecorded(ctx: CompletionContext, req: ChatRequest, signal?: AbortSignal, sink?: TokenSink): Promise<Completion> {
  const { text, forced, render } = await promptOf(ctx, req);
  sink?.begin(forced, req.stop);
  const prompt = await encodeAsSession(ctx.tokenizer, req.messages, text, render);
  if (prompt.length >= ctx.limits.maxPositions) throw badRequest("messages", `the prompt is ${prompt.length} tokens; the model's context is ${ctx.limits.maxPositions}`, "context_length_exceeded");
  const maxNew = Math.min(req.maxTokens ?? ctx.limits.maxTurnTokens, ctx.limits.maxPositions - prompt.length);
  const s = sampling(ctx, req);
  const base = req.seed !== undefined ? Math.abs(req.seed) : randomInt(2 ** 47);
  const rows: RowResult[] = await Promise.all(
    Array.from({ length: req.n }, (_, i) =>
      ctx.batcher.submit({ spec: { tokens: prompt, seed: deriveSeed(base, i), maxNewTokens: maxNew, temperature: s.temperature, topP: s.topP, stop: req.stop, topLogprobs: req.logprobs ? req.topLogprobs : 0 }, deadline: performance.now() + ctx.requestTimeoutMs, signal, ...(sink ? { onToken: (id: number) => sink.token(i, id) } : {}) }),
    ),
  );
  for (const r of rows) ctx.batcher.drop(r.session);
  const choices = rows.map((r, i) => {
    const failures: ParseFailure[] = [];
    const c = choiceOf(ctx, req, i, forced, r, failures, []);
    for (const f of failures) ctx.onParseFailure?.(f);
    return c;
  });
  return completion(ctx, choices, prompt.length * req.n, rows.reduce((n, r) => n + r.tokens.length, 0), rows);
}

/** A choice as the assistant message an agent appends to its history. */
function assistantMessage(c: Choice): TemplateMessage {
  const calls = c.message.tool_calls?.map((t) => ({ id: t.id, type: "function" as const, function: { name: t.function.name, arguments: JSON.parse(t.function.arguments) as Record<string, unknown> } }));
  return { role: "assistant", content: c.message.content ?? "", ...(calls ? { tool_calls: calls } : {}) };
}
