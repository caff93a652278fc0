/**
 * Replaying a recorded sample, from the driver: the sample's rollout call is
 * rebuilt from the step's held samples (every row of the call, its prompt,
 * row seed and recorded observations; or an agent lease's logged engine
 * batches), run again on a rollout executor's replay engine at the policy
 * version it was sampled with (services/replay-host.ts), and the sample's
 * tokens and logprobs are compared with the recording, bit for bit. A
 * difference is a `ReplayMismatchError` naming the first differing token:
 * never shown as if it matched. The replayed episode carries each
 * generated token's alternatives (views.ts shows them), and what-if branches
 * and other versions start from it.
 */
import { HearthError } from "../../errors/index.js";
import type { TokenAlternatives } from "../../tensor/types.js";
import type { ReplayOutput } from "../services/replay-host.js";
import type { StepServices } from "../run/step-services.js";
import { weightsKey } from "../state/run-objects.js";
import type { ScoredSample, StepResult } from "../types.js";

/** A replay that did not reproduce the recording: where it first differs. */
export class ReplayMismatchError extends HearthError {
  override name = "ReplayMismatchError";
  declare readonly sample: string;
  declare readonly index: number;
  constructor(message: string, fields: { sample: string; index: number }) {
    super(message, undefined, { sample: fields.sample, index: fields.index });
  }
}

/** What to replay, and how. */
export interface ReplayOptions {
  /** The step (default the latest held) and the sample's index in it (as the trajectory table numbers them). */
  step?: number;
  sample: number;
  /** Each generated token's alternatives to show (default 5; 0–20). */
  topK?: number;
  /** Run the tools again with the environment as loaded now (after `reloadEnvironment`) instead of inserting what was recorded; no equality is checked then. */
  environment?: "recorded" | "current";
}

/** A replayed sample: the recording, what the replay produced, and each generated token's alternatives. */
export interface Replayed {
  step: number;
  index: number;
  sample: ScoredSample;
  version: number;
  /** The replay's tokens, mask and logprobs (the recording's when it matched). */
  tokens: Int32Array;
  mask: Uint8Array;
  logprobs: Float32Array;
  /** Per position of `tokens`: the alternatives of a generated token (undefined elsewhere). */
  alternatives: Array<TokenAlternatives | undefined>;
  /** It was checked equal to the recording, token for token and logprob for logprob (false with `environment: "current"`). */
  matched: boolean;
  /** The replay's own timings: bringing the replay engine to the version, and running the call. */
  loadSeconds: number;
  seconds: number;
  /** The replay's output object (its owner deletes it with the step's). */
}

/** The weight chains a version may be found in: the live weights object, then the kept history (newest first). */
export function versionChains(svc: StepServices): string[] {
  return [weightsKey(svc.opts.name), ...(svc.history?.keys() ?? [])];
}

/** The runs of one value in a mask: [start, end) of each. */
export function runsOf(mask: ArrayLike<number>, value: number, from = 0): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let i = from; i < mask.length; ) {
    if (mask[i] !== value) {
      i++;
      continue;
    }
    let j = i;
    while (j < mask.length && mask[j] === value) j++;
    out.push([i, j]);
    i = j;
  }
  return out;
}

/** The observations a recorded environment-path episode inserted, in order (each mask-0 run after a generated one). */
export function recordedObservations(s: Pick<ScoredSample, "tokens" | "mask" | "promptLength">): number[][] {
  return runsOf(s.mask, 0, s.promptLength).map(([a, b]) => Array.from(s.tokens.subarray(a, b)));
}

/** The rows of `s`'s call among a step's samples, by row; a clear error when some were not kept. */
function callRows(r: StepResult, s: ScoredSample): ScoredSample[] {
  const id = s.call!.id;
  const rows = r.samples.filter((x) => x.call?.id === id).sort((a, b) => (a.row ?? 0) - (b.row ?? 0));
  if (rows.length !== s.call!.rows) {
    throw new HearthError(`sample ${s.itemId} of step ${r.metrics.step}: its rollout call had ${s.call!.rows} rows but the step holds ${rows.length} of them (stale groups dropped with --max-lag): a replay runs the whole call, so it cannot be replayed`);
  }
  return rows;
}

/** Compares a replayed run with the recording: the first differing token (id or logprob bits) is a ReplayMismatchError. */
function compare(label: string, recorded: { tokens: ArrayLike<number>; logprobs: ArrayLike<number> }, got: { tokens: ArrayLike<number>; logprobs: ArrayLike<number> }, offset: number, decode: (ids: number[]) => string): void {
  const n = Math.max(recorded.tokens.length, got.tokens.length);
  for (let i = 0; i < n; i++) {
    const a = recorded.tokens[i];
    const b = got.tokens[i];
    if (a !== b) {
      throw new ReplayMismatchError(`the replay of ${label} differs from the recording at token ${offset + i}: recorded ${a === undefined ? "(the end)" : `${a} ${JSON.stringify(decode([a]))}`}, replayed ${b === undefined ? "(the end)" : `${b} ${JSON.stringify(decode([b]))}`}`, { sample: label, index: offset + i });
    }
    if (!Object.is(Math.fround(recorded.logprobs[i]!), Math.fround(got.logprobs[i]!))) {
      throw new ReplayMismatchError(`the replay of ${label} differs from the recording at token ${offset + i}: the same token ${a} ${JSON.stringify(decode([a!]))}, but logprob ${got.logprobs[i]} instead of the recorded ${recorded.logprobs[i]} (another policy version, seed or batch than the original's)`, { sample: label, index: offset + i });
    }
  }
}

/** Replays sample `o.sample` of a held step (see the file's header); `version` runs it at another version (no check then). */
export async function replaySample(svc: StepServices, result: StepResult, o: ReplayOptions & { version?: number; keys?: string }): Promise<Replayed> {
  const s = result.samples[o.sample];
  const step = result.metrics.step;
  if (!s) throw new HearthError(`sample ${o.sample}: step ${step} has samples 0–${result.samples.length - 1}`);
  if (!s.call) throw new HearthError(`sample ${o.sample} of step ${step} records no rollout call (sampled before replays were recorded): it cannot be replayed`);
  const label = `${s.itemId}#${s.episode?.sample ?? s.row ?? o.sample} (sample ${o.sample} of step ${step})`;
  const version = o.version ?? s.policyVersion;
  const check = version === s.policyVersion && o.environment !== "current";
  const topK = o.topK ?? 5;
  const chains = versionChains(svc);
  const tok = svc.task.tokenizer;
  const decode = (ids: number[]): string => tok.decode(ids);
  const alternatives: Array<TokenAlternatives | undefined> = new Array(s.tokens.length).fill(undefined);
  if (s.call.log) {
    // An agent lease: its engine batches again; this session's completions against its sampled runs.
    const session = s.episode!.session;
    const r = await svc.rollout.call("replay", { setup: svc.rolloutSetup, version, chains, call: { kind: "agent", log: s.call.log }, topK, sessions: [session], keys: o.keys });
    const out = await svc.app.objects.get<ReplayOutput>(r.output);
    const completions = out.sessions?.[session] ?? [];
    // This sequence's completions come after those of the episode's earlier sequences.
    const earlier = result.samples.filter((x) => x.episode?.session === session && x.episode.sequence < s.episode!.sequence).reduce((n, x) => n + (x.sampled?.length ?? 0), 0);
    const runs = s.sampled ?? [];
    const tokens = Int32Array.from(s.tokens);
    const logprobs = Float32Array.from(s.logprobs);
    runs.forEach((run, k) => {
      const c = completions[earlier + k];
      if (!c) throw new ReplayMismatchError(`the replay of ${label} has no completion ${earlier + k + 1}: the log did not reproduce the session's requests`, { sample: label, index: run.at });
      if (check) compare(label, { tokens: s.tokens.subarray(run.at, run.at + run.n), logprobs: s.logprobs.subarray(run.at, run.at + run.n) }, c, run.at, decode);
      c.tokens.slice(0, run.n).forEach((t, i) => {
        tokens[run.at + i] = t;
        logprobs[run.at + i] = c.logprobs[i]!;
        alternatives[run.at + i] = c.alternatives?.[i];
      });
    });
    return { step, index: o.sample, sample: s, version, tokens, mask: Uint8Array.from(s.mask), logprobs, alternatives, matched: check, loadSeconds: r.loadSeconds, seconds: r.seconds };
  }
  // The environment path: the whole call, as it ran.
  const rows = callRows(result, s);
  const r = await svc.rollout.call("replay", {
    setup: svc.rolloutSetup,
    version,
    chains,
    call: {
      kind: "env",
      rows: rows.map((x) => ({ prompt: Array.from(x.tokens.subarray(0, x.promptLength)), seed: x.seed, label: `${x.itemId}#${x.row}`, observations: recordedObservations(x), item: { id: x.itemId, question: x.question } })),
      limits: s.call.limits ?? {},
      live: o.environment === "current",
    },
    topK,
    keys: o.keys,
  });
  const out = await svc.app.objects.get<ReplayOutput>(r.output);
  const ep = out.episodes?.[rows.indexOf(s)];
  if (!ep) throw new HearthError(`the replay of ${label} returned no episode for its row`);
  if (check) compare(label, s, ep, 0, decode);
  // Alternatives come per generated token, in order: place them at the generated positions.
  let g = 0;
  for (let i = ep.promptLength; i < ep.tokens.length; i++) if (ep.mask[i] === 1) alternatives[i] = ep.alternatives?.[g++];
  alternatives.length = ep.tokens.length;
  return { step, index: o.sample, sample: s, version, tokens: ep.tokens, mask: ep.mask, logprobs: ep.logprobs, alternatives, matched: check, loadSeconds: r.loadSeconds, seconds: r.seconds };
}
