/**
 * The replay surface of a run (`run.replay`, branches, `run.compareVersions`),
 * on the driver that holds the step results: a held sample is replayed
 * exactly (replay.ts) and returned as an EpisodeReplay whose what-if
 * branches run on a rollout executor's replay engine; the same episode under
 * other policy versions is compared token by token (each version's
 * teacher-forced logprob of every generated token) and re-sampled with the
 * same seed (the reward each version earns). Outputs of the executors go
 * through the cache under the run's replay keys and are deleted once read.
 */
import { JUPYTER_DISPLAY, table, type DataTable, type MimeBundle } from "../../notebook/index.js";
import { HearthError } from "../../errors/index.js";
import type { StepServices } from "../run/step-services.js";
import type { StepStore } from "../run/interactive.js";
import { replayKeys } from "../state/run-objects.js";
import type { RewardFn, ScoredSample } from "../types.js";
import { tokenRows, type ReplayJSON, type TokenRow } from "./episode.js";
import { replaySample, runsOf, versionChains, type ReplayOptions, type Replayed } from "./replay.js";
import { EpisodeReplay, type BranchAsk } from "./replayed.js";

/** What the replay surface needs of a run. */
export interface ReplayContext {
  svc: StepServices;
  results: StepStore;
  reward: () => RewardFn;
  /** A fresh key prefix for one replay's objects. */
  nextKeys: () => string;
}

function held(ctx: ReplayContext, step: number | undefined, sample: number): { step: number; s: ScoredSample } {
  const r = ctx.results.get(step);
  const s = r.samples[sample];
  if (!s) throw new HearthError(`sample ${sample}: step ${r.metrics.step} has samples 0–${r.samples.length - 1}`);
  return { step: r.metrics.step, s };
}

/** The reward of an episode's response (the environment path's; an agent's answer is its own, so a branch of one has none). */
function rewardOf(ctx: ReplayContext, s: ScoredSample, response: string): number | undefined {
  if (s.final !== undefined) return undefined;
  return ctx.reward()(response, s.golds);
}

/** A replay's JSON: its tokens, probabilities and alternatives, and the sample's reward (or, replayed otherwise, the replay's). */
function toJSON(ctx: ReplayContext, r: Replayed): ReplayJSON {
  const s = r.sample;
  const tok = ctx.svc.task.tokenizer;
  const response = tok.decode(Array.from(r.tokens.subarray(s.promptLength)));
  const same = r.matched;
  const reward = same ? s.reward : (rewardOf(ctx, s, response) ?? s.reward);
  return {
    step: r.step,
    sample: r.index,
    itemId: s.itemId,
    question: s.question,
    golds: s.golds,
    version: r.version,
    sampledWith: s.policyVersion,
    matched: r.matched,
    reward,
    answer: same ? s.answer : (ctx.svc.task.environment.answerOf(s.final ?? response) ?? null),
    finish: s.finish,
    tokens: tokenRows({ ...r, promptLength: s.promptLength }, tok),
    turns: new Set(runsTurns(r.mask, s.promptLength)).size,
    seconds: r.seconds,
    loadSeconds: r.loadSeconds,
  };
}

function runsTurns(mask: ArrayLike<number>, from: number): number[] {
  const turns: number[] = [];
  let t = -1;
  for (let i = from; i < mask.length; i++) if (mask[i] === 1 && (i === from || mask[i - 1] !== 1)) turns.push(++t);
  return turns;
}

/** Replays a held sample (see replay.ts) and wraps it for views and branches. */
export async function replayEpisode(ctx: ReplayContext, o: ReplayOptions & { version?: number }): Promise<EpisodeReplay> {
  const keys = ctx.nextKeys();
  try {
    const r = await replaySample(ctx.svc, ctx.results.get(o.step), { ...o, keys });
    return new EpisodeReplay(toJSON(ctx, r), (ask) => branchEpisode(ctx, ask));
  } finally {
    await ctx.svc.app.objects.delete(keys);
  }
}

/** Runs a what-if branch on a rollout executor: the episode's first `at` ids, the inserted text, then generation at the version with the row's seed. */
export async function branchEpisode(ctx: ReplayContext, ask: BranchAsk): Promise<{ episode: ReplayJSON; reward?: number }> {
  const { step, s } = held(ctx, ask.step, ask.sample);
  const tok = ctx.svc.task.tokenizer;
  const inserted = tok.encode(ask.insert);
  const prefix = [...Array.from(s.tokens.subarray(0, ask.at)), ...inserted];
  const limits = s.call?.limits ?? {};
  const used = prefix.length - s.promptLength;
  const maxResponse = (limits.maxResponseTokens ?? ctx.svc.opts.maxResponseTokens) - used;
  if (maxResponse <= 0) throw new HearthError(`the branch at token ${ask.at} leaves no room: the episode's response limit (${limits.maxResponseTokens ?? ctx.svc.opts.maxResponseTokens} tokens) is used up by then`);
  // Calls made before the branch point count against the limit (each observation after a turn was one).
  const callsBefore = runsOf(s.mask.subarray(0, ask.at), 0, s.promptLength).length;
  // A forced text inside a turn: the environment reads that turn as what came before it in the turn, the text, and what follows.
  let turnStart = ask.at;
  while (ask.kind === "forced" && turnStart > s.promptLength && s.mask[turnStart - 1] === 1) turnStart--;
  const turnPrefix = ask.kind === "forced" ? tok.decode(Array.from(s.tokens.subarray(turnStart, ask.at))) + ask.insert : "";
  const r = await ctx.svc.rollout.call("branch", {
    setup: ctx.svc.rolloutSetup,
    version: ask.version,
    chains: versionChains(ctx.svc),
    prompt: prefix,
    turnPrefix,
    seed: s.seed,
    limits: { ...limits, maxResponseTokens: maxResponse, maxToolCalls: Math.max(0, (limits.maxToolCalls ?? ctx.svc.opts.maxToolCalls) - callsBefore) },
    item: { id: s.itemId, question: s.question },
    topK: 5,
    agent: s.final !== undefined,
  });
  const ep = r.episode;
  // The rows: the original's before the branch, the inserted text marked, then what the branch generated.
  const before = tokenRows({ tokens: s.tokens, mask: s.mask, logprobs: s.logprobs, alternatives: [], promptLength: s.promptLength }, tok).slice(0, ask.at);
  const alternatives: Replayed["alternatives"] = new Array(ep.tokens.length).fill(undefined);
  let g = 0;
  for (let i = ep.promptLength; i < ep.tokens.length; i++) if (ep.mask[i] === 1) alternatives[i] = ep.alternatives?.[g++];
  const after = tokenRows({ tokens: ep.tokens, mask: ep.mask, logprobs: ep.logprobs, alternatives, promptLength: ask.at }, tok, ask.kind === "forced" ? { at: ask.at, n: inserted.length } : undefined);
  const rows: TokenRow[] = [...before, ...after.slice(ask.at)];
  const response = tok.decode(Array.from(ep.tokens.subarray(s.promptLength)));
  const reward = rewardOf(ctx, s, response);
  const episode: ReplayJSON = {
    step,
    sample: ask.sample,
    itemId: s.itemId,
    question: s.question,
    golds: s.golds,
    version: ask.version,
    sampledWith: s.policyVersion,
    matched: false,
    reward: reward ?? NaN,
    answer: ctx.svc.task.environment.answerOf(response),
    finish: ep.finish,
    tokens: rows,
    turns: new Set(rows.filter((x) => x.kind === "generated").map((x) => x.turn)).size,
    seconds: 0,
    loadSeconds: 0,
  };
  return { episode, ...(reward !== undefined ? { reward } : {}) };
}

/** One episode under several policy versions (see compareVersions). */
export class VersionComparison {
  constructor(
    readonly step: number,
    readonly sample: number,
    readonly versions: number[],
    /** Per generated token of the recorded episode: its text and each version's teacher-forced logprob. */
    readonly rows: Array<{ i: number; token: string; logprobs: number[] }>,
    /** Each version's re-sample with the same seed: its reward and answer. */
    readonly resampled: Array<{ version: number; reward?: number; answer: string | null; episode: ReplayJSON }>,
  ) {}

  /** Per version, the summed logprob of the recorded episode's generated tokens. */
  get totals(): number[] {
    return this.versions.map((_, k) => this.rows.reduce((n, r) => n + r.logprobs[k]!, 0));
  }

  /** The tokens, one row each, with each version's logprob and the difference of the last from the first. */
  table(): DataTable {
    const [a, b] = [this.versions[0]!, this.versions.at(-1)!];
    const rows = this.rows.map((r) => ({ i: r.i, token: r.token, ...Object.fromEntries(this.versions.map((v, k) => [`logprob v${v}`, r.logprobs[k]!])), [`v${b} − v${a}`]: r.logprobs.at(-1)! - r.logprobs[0]! }));
    return table(rows, { title: `step ${this.step}, sample ${this.sample} under versions ${this.versions.join(", ")}`, limit: 400 });
  }

  toJSON(): Record<string, unknown> {
    return { step: this.step, sample: this.sample, versions: this.versions, totals: this.totals, rows: this.rows, resampled: this.resampled.map(({ episode: _e, ...r }) => r) };
  }

  private summary(): string {
    const lines = this.versions.map((v, k) => `version ${v}: the recorded episode's generated tokens sum to logprob ${this.totals[k]!.toFixed(3)}; re-sampled with the same seed: reward ${this.resampled[k]?.reward ?? "–"}, answer ${JSON.stringify(this.resampled[k]?.answer ?? null)}`);
    const moved = [...this.rows].sort((x, y) => Math.abs(y.logprobs.at(-1)! - y.logprobs[0]!) - Math.abs(x.logprobs.at(-1)! - x.logprobs[0]!)).slice(0, 5);
    return [`step ${this.step}, sample ${this.sample} under versions ${this.versions.join(" and ")}`, ...lines, "the tokens whose logprob moved most:", ...moved.map((r) => `  token ${r.i} ${JSON.stringify(r.token)}: ${r.logprobs.map((x) => x.toFixed(3)).join(" → ")}`)].join("\n");
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const t = this.table()[JUPYTER_DISPLAY]();
    return { "text/plain": this.summary(), "text/html": `<pre>${this.summary().replace(/&/g, "&amp;").replace(/</g, "&lt;")}</pre>${t["text/html"] as string}` };
  }
}

/**
 * The recorded episode of a held sample under each of `versions`: every
 * generated token's teacher-forced logprob (how likely each version finds
 * what was sampled), and the episode re-sampled from its prompt with the same
 * seed at each version (the reward each earns).
 */
export async function compareVersions(ctx: ReplayContext, o: { step?: number; sample: number }, versions: number[]): Promise<VersionComparison> {
  if (versions.length < 2) throw new HearthError("compareVersions needs at least two policy versions");
  const { step, s } = held(ctx, o.step, o.sample);
  const chains = versionChains(ctx.svc);
  const tok = ctx.svc.task.tokenizer;
  const scored: Float32Array[] = [];
  for (const v of versions) scored.push((await ctx.svc.rollout.call("scoreTokens", ctx.svc.rolloutSetup, v, chains, Array.from(s.tokens))).logprobs);
  const rows: Array<{ i: number; token: string; logprobs: number[] }> = [];
  for (let i = s.promptLength; i < s.tokens.length; i++) if (s.mask[i] === 1) rows.push({ i, token: tok.decode([s.tokens[i]!]), logprobs: scored.map((x) => x[i]!) });
  const resampled = [];
  for (const v of versions) {
    const b = await branchEpisode(ctx, { step, sample: o.sample, version: v, at: s.promptLength, insert: "", kind: "forced" });
    resampled.push({ version: v, ...(b.reward !== undefined ? { reward: b.reward } : {}), answer: b.episode.answer, episode: b.episode });
  }
  return new VersionComparison(step, o.sample, versions, rows, resampled);
}

export { replayKeys };
