/**
 * The multi-turn rollout loop, the same for every environment: generate
 * until a stop string (or a limit), hand the turn to the environment, insert
 * the observation it returns with mask bits 0 (never trained on), and resume
 * on the same KV cache, until every row is done. The limits are the
 * layer's: tool calls per sample, tokens per turn, tokens per response.
 * Every generated token has mask bit 1 and its sampler logprob.
 */
import type { TensorEngine } from "../tensor/index.js";
import type { GeneratedRow, TokenAlternatives } from "../tensor/types.js";
import type { Environment, EnvStep } from "./environment.js";
import { EnvironmentError } from "./errors.js";
import type { TextTokenizer } from "./text/tokenizer.js";
import type { Episode, EpisodeLimits } from "./types.js";

/** What the loop needs from a tensor engine (tests pass a scripted fake). */
export type EpisodeEngine = Pick<TensorEngine, "generate" | "resume" | "release">;

/** Longest a tool call may take before its sample fails (default of EpisodeOptions.toolTimeoutMs). */
export const TOOL_TIMEOUT_MS = 30_000;

/** One row of a batch: its prompt, its episode state, and how errors name it. */
export interface EpisodeRow {
  prompt: number[];
  state: unknown;
  /** Names the sample in errors (item id and sample index). */
  label: string;
  /** Text of the current turn already at the prompt's end (a what-if branch that forced the turn's start): the environment reads the turn as this plus what is generated. */
  turnPrefix?: string;
}

/** Options of runEpisodes beyond the limits. */
export interface EpisodeOptions extends EpisodeLimits {
  /** A tool call that takes longer fails its sample (default TOOL_TIMEOUT_MS). */
  toolTimeoutMs?: number;
  /** Also return each generated token's k most likely alternatives and entropy (replays; 0: none). */
  topLogprobs?: number;
}

interface RowState {
  tokens: number[];
  mask: number[];
  logprobs: number[];
  alternatives: TokenAlternatives[];
  calls: string[];
  done: boolean;
  finish: Episode["finish"];
  error?: string;
}

/** Runs `env.step` with a deadline; a throw or a timeout becomes an EnvironmentError naming the environment and the sample. */
async function stepWithin(env: Environment, row: EpisodeRow, text: string, stop: string, callsLeft: number, timeoutMs: number): Promise<EnvStep> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new EnvironmentError(`environment '${env.name}' did not answer the turn of sample ${row.label} (stopped at ${stop}) within ${timeoutMs} ms`, { environment: env.name, sample: row.label })), timeoutMs);
    });
    const out = await Promise.race([Promise.resolve().then(() => env.step(row.state, { text, stop, callsLeft })), deadline]);
    if (out === null || typeof out !== "object" || (!("done" in out) && typeof (out as { observation?: unknown }).observation !== "string")) {
      throw new EnvironmentError(`environment '${env.name}' answered the turn of sample ${row.label} with ${JSON.stringify(out)}; step() returns { done: true } or { observation, call? }`, { environment: env.name, sample: row.label });
    }
    if ("observation" in out && out.call !== undefined && callsLeft <= 0) {
      throw new EnvironmentError(`environment '${env.name}' ran a tool call (${JSON.stringify(out.call).slice(0, 80)}) for sample ${row.label} past the limit of tool calls; with callsLeft 0 it must answer without running the tool`, { environment: env.name, sample: row.label, call: String(out.call) });
    }
    return out;
  } catch (err) {
    if (err instanceof EnvironmentError) throw err;
    throw new EnvironmentError(`environment '${env.name}' failed on sample ${row.label} (a turn that stopped at ${stop}): ${(err as Error)?.message ?? String(err)}`, { environment: env.name, sample: row.label, cause: err });
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs one batch of episodes on an engine: generate, let the environment
 * answer each turn that stopped at one of its stop strings, resume, until
 * every row is done or hit a limit. A row whose environment step failed
 * ends with finish "error" (the others go on).
 */
export async function runEpisodes(engine: EpisodeEngine, tokenizer: TextTokenizer, env: Environment, rows: EpisodeRow[], opts: EpisodeOptions = {}): Promise<Episode[]> {
  const maxCalls = opts.maxToolCalls ?? 4;
  const maxTurn = opts.maxTurnTokens ?? 64;
  const maxResponse = opts.maxResponseTokens ?? 320;
  const toolTimeoutMs = opts.toolTimeoutMs ?? TOOL_TIMEOUT_MS;
  const stops = new Set(env.stops);
  // End-of-turn ids (e.g. <|im_end|>) end an episode like the length limit does: the turn is over.
  const sampling = { temperature: opts.temperature ?? 1, topP: opts.topP ?? 1, stop: [...env.stops], eosTokenIds: tokenizer.eosIds, ...(opts.topLogprobs ? { topLogprobs: opts.topLogprobs } : {}) };
  const prompts = rows.map((r) => r.prompt);
  const states: RowState[] = prompts.map((p) => ({ tokens: [...p], mask: p.map(() => 0), logprobs: p.map(() => 0), alternatives: [], calls: [], done: false, finish: "length" }));
  const perRow = opts.seeds !== undefined;
  const first = await engine.generate(prompts, { ...sampling, maxNewTokens: maxTurn, ...(perRow ? { seeds: opts.seeds } : { seed: opts.seed ?? 0 }) });
  let generated: GeneratedRow[] = first.rows;
  try {
    for (let turn = 1; ; turn++) {
      const appended = new Map<number, number[]>();
      let budget = maxTurn;
      // The turns that stopped at a stop string go to the environment together (its tool calls run concurrently, each with its deadline).
      const asked: Array<{ i: number; text: string; stop: string }> = [];
      for (const [i, row] of generated.entries()) {
        const s = states[i]!;
        if (s.done || row.finishReason === "idle") continue;
        s.tokens.push(...row.tokens);
        s.mask.push(...row.tokens.map(() => 1));
        s.logprobs.push(...row.logprobs);
        if (row.alternatives) s.alternatives.push(...row.alternatives);
        if (!(row.finishReason === "stop" && row.stop !== null && stops.has(row.stop))) {
          s.done = true;
          s.finish = row.finishReason === "eos" ? "eos" : "length";
          continue;
        }
        asked.push({ i, text: (turn === 1 ? (rows[i]!.turnPrefix ?? "") : "") + tokenizer.decode(row.tokens), stop: row.stop });
      }
      const answers = await Promise.all(
        asked.map(({ i, text, stop }) =>
          stepWithin(env, rows[i]!, text, stop, maxCalls - states[i]!.calls.length, toolTimeoutMs).then(
            (out): { i: number; out?: EnvStep; error?: string } => ({ i, out }),
            (err: unknown): { i: number; out?: EnvStep; error?: string } => ({ i, error: (err as Error).message ?? String(err) }),
          ),
        ),
      );
      for (const { i, out, error } of answers) {
        const s = states[i]!;
        if (!out) {
          s.done = true;
          s.finish = "error";
          s.error = error;
          continue;
        }
        if ("done" in out) {
          s.done = true;
          s.finish = "answer";
          continue;
        }
        const ids = out.ids ? [...out.ids] : tokenizer.encode(out.observation);
        const used = s.tokens.length - prompts[i]!.length;
        if (used + ids.length + 1 > maxResponse) {
          s.done = true;
          s.finish = "length";
          continue;
        }
        if (out.call !== undefined) s.calls.push(out.call);
        s.tokens.push(...ids);
        s.mask.push(...ids.map(() => 0));
        s.logprobs.push(...ids.map(() => 0));
        appended.set(i, ids);
        budget = Math.min(budget, maxResponse - (used + ids.length));
      }
      if (appended.size === 0) break;
      // Per-row seeds continue each row's own stream; a batch seed gets a fresh value per turn.
      generated = await engine.resume(first.session, appended, { ...sampling, maxNewTokens: Math.max(1, budget), ...(perRow ? {} : { seed: (opts.seed ?? 0) + turn * 7919 }) });
    }
  } finally {
    await engine.release(first.session).catch(() => undefined);
  }
  return states.map((s, i) => {
    const p = prompts[i]!.length;
    return {
      promptLength: p,
      tokens: Int32Array.from(s.tokens),
      mask: Uint8Array.from(s.mask),
      logprobs: Float32Array.from(s.logprobs),
      response: tokenizer.decode(s.tokens.slice(p)),
      calls: s.calls,
      finish: s.finish,
      ...(s.error !== undefined ? { error: s.error } : {}),
      ...(opts.topLogprobs ? { alternatives: s.alternatives } : {}),
    };
  });
}
