/**
 * Agents as hearth runs them, and what their episodes become. An agent is an
 * async function `(item, { baseURL, apiKey, model, signal }) => answer`,
 * written with any OpenAI-compatible client, that returns the final answer
 * as a string (the last assistant message's text, as an agent would) or
 * `{ answer?, reward? }`. As a module (`FILE#EXPORT`) it runs warm in the
 * rollout executors beside the model; a notebook cell or any process can run
 * one against the same endpoint too. Each episode has a deadline: past it
 * the agent's signal aborts, its session ends (later requests get 404) and
 * only its own sample fails.
 *
 * A closed lease's sessions become trajectories: one per training sequence,
 * carrying the episode's final answer, the agent's reward if it gave one,
 * the sampled runs with their engine digests, and the transcript; and the
 * counters a step's alarms read.
 */
import type { AgentRolloutStats, TaskItem, Trajectory } from "../types.js";
import type { AgentSession, SessionEnd } from "./session.js";

/** What an agent is given besides its task item. */
export interface AgentContext {
  /** The endpoint (`http://127.0.0.1:PORT/v1`). */
  baseURL: string;
  /** The episode's session key. */
  apiKey: string;
  /** The served model's name. */
  model: string;
  /** Aborts at the episode's deadline. */
  signal: AbortSignal;
}

/** An agent (see the file's header). */
export type AgentFn = (item: { id: string; question: string }, ctx: AgentContext) => Promise<string | { answer?: string; reward?: number }> | string | { answer?: string; reward?: number };

/** Where an agent's function is: a module and its export. */
export interface AgentSpec {
  module: string;
  export: string;
}

/** Default deadline of one episode of an agent. */
export const AGENT_TIMEOUT_MS = 120_000;

/** Parses `FILE#EXPORT` (the export defaults to `default`). */
export function parseAgentSpec(text: string): AgentSpec {
  const at = text.lastIndexOf("#");
  const module = at > 0 ? text.slice(0, at) : text;
  const exp = at > 0 ? text.slice(at + 1) : "default";
  if (module === "" || exp === "") throw new RangeError(`--agent ${text}: expected FILE#EXPORT, e.g. ./my-agent.js#solve`);
  return { module, export: exp };
}

/** Loads an agent function from its module, with a clear error when the export is not a function. */
export async function loadAgent(spec: AgentSpec, importer: (module: string) => Promise<Record<string, unknown>>): Promise<AgentFn> {
  const mod = await importer(spec.module);
  const fn = mod[spec.export];
  if (typeof fn !== "function") throw new TypeError(`${spec.module} has no export '${spec.export}' that is a function (it exports ${Object.keys(mod).join(", ") || "nothing"}); an agent is an async function (item, { baseURL, apiKey, model, signal }) returning its final answer`);
  return fn as AgentFn;
}

/** What an agent's return value says (a clear error for anything else). */
export function endOf(value: unknown, label: string): SessionEnd {
  if (typeof value === "string") return { answer: value };
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const v = value as { answer?: unknown; reward?: unknown };
    const answer = v.answer;
    const reward = v.reward;
    if ((answer === undefined || typeof answer === "string") && (reward === undefined || (typeof reward === "number" && Number.isFinite(reward))) && (answer !== undefined || reward !== undefined)) {
      return { ...(answer !== undefined ? { answer } : {}), ...(reward !== undefined ? { reward } : {}) };
    }
  }
  return { error: `the agent returned ${JSON.stringify(value)?.slice(0, 80) ?? String(value)} for sample ${label}; return the final answer as a string, or { answer?, reward? }` };
}

/**
 * Runs `fn` once per session, all at once, each within `timeoutMs`; calls
 * `onEnd` as each episode ends (success, throw or deadline) and resolves
 * with every session's end.
 */
export async function runAgents(
  fn: AgentFn,
  sessions: ReadonlyArray<{ id: string; apiKey: string; item: { id: string; question: string }; label: string }>,
  ctx: { baseURL: string; model: string; timeoutMs: number },
  onEnd: (id: string, end: SessionEnd) => void,
): Promise<Map<string, SessionEnd>> {
  const ends = new Map<string, SessionEnd>();
  await Promise.all(
    sessions.map(async (s) => {
      const abort = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<SessionEnd>((resolve) => {
        timer = setTimeout(() => {
          abort.abort(new Error(`the episode's deadline of ${ctx.timeoutMs} ms passed`));
          resolve({ error: `the agent did not finish sample ${s.label} within ${ctx.timeoutMs} ms (--agent-timeout-ms)` });
        }, ctx.timeoutMs);
      });
      const ran = Promise.resolve()
        .then(() => fn(s.item, { baseURL: ctx.baseURL, apiKey: s.apiKey, model: ctx.model, signal: abort.signal }))
        .then(
          (v) => endOf(v, s.label),
          (err: unknown) => ({ error: `the agent failed on sample ${s.label}: ${(err as Error)?.message ?? String(err)}` }),
        );
      const end = await Promise.race([ran, deadline]);
      clearTimeout(timer);
      ends.set(s.id, end);
      onEnd(s.id, end);
    }),
  );
  return ends;
}

/** A closed lease's sessions as trajectories (one per training sequence; an episode with none gives one empty trajectory) and their counters. */
export function episodesOf(sessions: readonly AgentSession[], policyVersion: number, refused: number): { trajectories: Trajectory[]; stats: AgentRolloutStats } {
  const stats: AgentRolloutStats = { sessions: sessions.length, requests: 0, toolCalls: 0, parseFailures: 0, prefixMismatches: 0, refused, lengthCuts: 0, sessionsWithoutCalls: 0, failed: 0, examples: {} };
  const example = (what: string, s: AgentSession, text: string): void => {
    stats.examples[what] ??= { sample: s.label, text: text.slice(0, 300) };
  };
  const trajectories: Trajectory[] = [];
  for (const s of sessions) {
    const st = s.stats;
    stats.requests += st.requests;
    stats.toolCalls += st.toolCalls;
    stats.parseFailures += st.parseFailures.length;
    stats.prefixMismatches += st.prefixMismatches;
    stats.lengthCuts += st.lengthCuts;
    if (st.parseFailures.length > 0) example("parseFailures", s, `${st.parseFailures[0]!.reason}: ${st.parseFailures[0]!.text}`);
    if (st.prefixMismatches > 0) example("prefixMismatches", s, "a request's rendered prompt did not extend the tokens sampled so far");
    if (st.lengthCuts > 0) example("lengthCuts", s, "a request came past the session's turn or token limit");
    if (st.toolCalls === 0) {
      stats.sessionsWithoutCalls++;
      example("sessionsWithoutCalls", s, s.ended?.answer ?? "");
    }
    const failed = s.ended?.error !== undefined;
    if (failed) {
      stats.failed++;
      example("failed", s, s.ended!.error!);
    }
    const seqs = s.allSequences();
    const common = {
      seed: s.spec.seed,
      itemId: s.spec.itemId,
      group: s.spec.item,
      policyVersion,
      finish: (failed ? "error" : "answer") as Trajectory["finish"],
      ...(failed ? { error: s.ended!.error } : {}),
      final: s.ended?.answer ?? "",
      ...(s.ended?.reward !== undefined ? { agentReward: s.ended.reward } : {}),
      messages: s.transcript,
    };
    const agentStats = { requests: st.requests, toolCalls: st.toolCalls, parseFailures: st.parseFailures.length, ...(st.parseFailures[0] ? { firstParseFailure: st.parseFailures[0] } : {}), prefixMismatches: st.prefixMismatches, lengthCuts: st.lengthCuts };
    if (seqs.length === 0) {
      trajectories.push({ ...common, promptLength: 0, tokens: new Int32Array(0), mask: new Uint8Array(0), logprobs: new Float32Array(0), response: "", calls: [], episode: { session: s.id, sample: s.spec.sample, sequence: 0, sequences: 1 }, sampled: [], agentStats });
      continue;
    }
    seqs.forEach((q, k) => {
      trajectories.push({
        ...common,
        promptLength: q.promptLength,
        tokens: Int32Array.from(q.tokens),
        mask: Uint8Array.from(q.mask),
        logprobs: Float32Array.from(q.logprobs),
        response: q.text.slice(q.promptText.length),
        calls: q.calls,
        episode: { session: s.id, sample: s.spec.sample, sequence: k, sequences: seqs.length },
        sampled: q.sampled,
        ...(k === 0 ? { agentStats } : {}),
      });
    });
  }
  return { trajectories, stats };
}

/** The items of a lease as agents get them (`{ id, question }`). */
export function agentItem(item: Pick<TaskItem, "id" | "question">): { id: string; question: string } {
  return { id: item.id, question: item.question };
}
