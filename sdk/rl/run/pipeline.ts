/**
 * One Search-R1 step as a pipeline of plain functions over the run's
 * services: fan prompts out to the rollout pool, score the answers with the
 * reward, compute group advantages, ship per-rank slices to the trainer gang
 * (rank 0 then publishes the new weights), and gather the step's metrics.
 * With a max lag K ≥ 1 the next K steps' rollouts are already running while
 * this step updates (overlap.ts); with K = 0 the step is the synchronous
 * loop. Nothing here knows which task recipe it runs.
 */
import type { ObjectRef } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import { deriveSeed } from "../../tensor/seeds.js";
import type { GangHandle, PoolHandle } from "../../runtime/handles.js";
import { buildSlices, scoreSamples, type ScoredSample } from "../scoring/batch.js";
import type { SearchR1Options } from "./options.js";
import type { ProtocolOptions } from "../../envs/searchr1/protocol.js";
import type { PreparedTask } from "./recipe.js";
import { lagOf, lagStats, type RolloutsAhead } from "./overlap.js";
import { emReward, type RewardFn } from "../../envs/searchr1/reward.js";
import type { RolloutItem, RolloutResult, SearchR1Rollout, Trajectory } from "../services/rollout-service.js";
import { evalKeys, stepKeys } from "../state/run-objects.js";
import { rng, type Question } from "../../envs/searchr1/tasks/synthetic.js";
import type { SearchR1Trainer, TrainResult } from "../services/trainer-service.js";

/** One step's metrics (the metrics.jsonl fields). */
export interface StepMetrics {
  step: number;
  reward_mean: number;
  em: number;
  searches_per_sample: number;
  groups_kept: number;
  groups_dropped: number;
  samples_trained: number;
  tokens: number;
  rollout_s: number;
  update_s: number;
  publish_bytes: number;
  /** Seconds rank 0 spent publishing the new weights (part of update_s). */
  publish_s?: number;
  step_s: number;
  weights_version: number;
  /** Weight bytes the rollouts fetched for this step, and how many executors fetched any. */
  sync_bytes: number;
  sync_executors: number;
  /** Longest time one rollout call spent fetching and applying new weights (part of its rollout). */
  sync_s?: number;
  /** Live agreement checks from the trainers (absent when no sample was trained on): mean and max |sampler − trainer| logprob on generated tokens. */
  logprob_gap?: number;
  logprob_gap_max?: number;
  /** k3 KL to the frozen reference, per generated token. */
  kl?: number;
  /** Policy ratio π/π_old: mean and max over generated tokens; share of tokens clipped. */
  ratio_mean?: number;
  ratio_max?: number;
  clip_frac?: number;
  /** Policy entropy on generated tokens. */
  entropy?: number;
  loss?: number;
  grad_norm?: number;
  eval_em?: number;
  eval_searches?: number;
  /** Held-out EM per question category (Question.category: the chain task's hop count), on evaluation steps of tasks whose questions have one. */
  eval_em_by?: Record<string, number>;
  /* The overlap fields below are written by every step; optional only because a history from before them lacks them. */
  /** The lag allowed (--max-lag), and the trainers' policy version this step trained from. */
  max_lag?: number;
  policy_version?: number;
  /** How many versions the trained trajectories lag behind it: max and mean (0 when in sync). */
  policy_lag_max?: number;
  policy_lag_mean?: number;
  /** Trajectories dropped for lagging more than max_lag versions (only with max_lag ≥ 1). */
  stale_dropped?: number;
  /** Executor-seconds the rollout calls of this step's trajectories took, and the trainers' train calls (summed over ranks). */
  rollout_busy_s?: number;
  trainer_busy_s?: number;
  /** Busy seconds over step_s × executors (rollouts; trainers): the share of the step each kind worked. */
  rollout_util?: number;
  trainer_util?: number;
}

/** What `step()` returns. */
export interface StepResult {
  metrics: StepMetrics;
  /** The step's trajectories (one object per rollout call). */
  trajectories: ObjectRef[];
  /** Scored samples, for inspection. */
  samples: ScoredSample[];
}

/** Result of an evaluation. */
export interface EvalResult {
  em: number;
  searchesPerSample: number;
  samples: ScoredSample[];
  /** EM and searches per question category (empty when the task's questions have none), in category order. */
  byCategory: CategoryEval[];
}

/** An evaluation's results on the held-out questions of one category. */
export interface CategoryEval {
  category: string;
  questions: number;
  em: number;
  searchesPerSample: number;
}

/** Breaks scored samples down by their question's category (questions without one are left out). */
export function evalByCategory(questions: readonly Question[], samples: readonly ScoredSample[]): CategoryEval[] {
  const categoryOf = new Map(questions.map((q) => [q.id, q.category]));
  const groups = new Map<string, ScoredSample[]>();
  for (const s of samples) {
    const c = categoryOf.get(s.itemId);
    if (c === undefined) continue;
    groups.set(c, [...(groups.get(c) ?? []), s]);
  }
  return [...groups.entries()]
    .sort(([a], [b]) => a.localeCompare(b, "en", { numeric: true }))
    .map(([category, xs]) => ({ category, questions: xs.length, em: mean(xs.map((s) => emReward(s.response, s.golds))), searchesPerSample: mean(xs.map((s) => s.searches.length)) }));
}

/** The per-category EM of an evaluation as a metrics field (undefined when it has no categories). */
export function emByCategory(ev: Pick<EvalResult, "byCategory">): Record<string, number> | undefined {
  return ev.byCategory.length === 0 ? undefined : Object.fromEntries(ev.byCategory.map((c) => [c.category, c.em]));
}

/** What the pipeline runs on. */
export interface StepServices {
  app: App;
  opts: SearchR1Options;
  task: PreparedTask;
  rollout: PoolHandle<SearchR1Rollout>;
  trainer: GangHandle<SearchR1Trainer>;
  rolloutSetup: ObjectRef;
  weightsKey: string;
  /** The rollouts started ahead of their steps and the trainers' policy version. */
  ahead: RolloutsAhead<RolloutParts>;
}

/** The rollout calls of one batch of questions. */
export type RolloutParts = Array<{ q: Question[]; r: RolloutResult }>;

/** The protocol limits a run's rollouts use. */
export function protocolOptions(o: SearchR1Options, temperature: number, seed: number): ProtocolOptions {
  return { maxSearches: o.maxSearches, topK: o.topK, maxTurnTokens: o.maxTurnTokens, maxResponseTokens: o.maxResponseTokens, temperature, seed };
}

/**
 * Rolls out questions (G samples each) across the pool, `promptsPerTask` per
 * call. Sample g of the question at position p of step `step` samples with
 * deriveSeed(run seed, step, p, g): the same tokens whichever executor takes
 * the call, in whatever batch, whenever. Each call's trajectories object
 * goes under the key prefix `keys` (run-objects.ts), whose owner deletes it.
 */
export async function rollouts(svc: StepServices, questions: Question[], groupSize: number, temperature: number, step: number, keys?: string): Promise<RolloutParts> {
  const per = svc.opts.promptsPerTask;
  const chunks: Question[][] = [];
  for (let i = 0; i < questions.length; i += per) chunks.push(questions.slice(i, i + per));
  return Promise.all(
    chunks.map(async (q, i) => {
      const items: RolloutItem[] = q.map((x, j) => ({ id: x.id, question: x.question, seed: deriveSeed(svc.opts.seed, step, i * per + j) }));
      const r = await svc.rollout.call("rollout", {
        setup: svc.rolloutSetup,
        weights: svc.weightsKey,
        items,
        groupSize,
        protocol: protocolOptions(svc.opts, temperature, step * 1000 + i),
        keys,
      });
      return { q, r };
    }),
  );
}

/**
 * Fetches the trajectories of rollout calls and scores them with `reward`.
 * With `fresh`, a group with a trajectory it refuses is left out (a group's
 * samples come from one call, so they share a policy version) and counted.
 * The client keeps no copy (the scored samples hold what was read); the
 * objects stay for their owner to delete.
 */
export async function collect(app: App, parts: RolloutParts, reward: RewardFn, fresh?: (t: Trajectory) => boolean): Promise<ReturnType<typeof scoreSamples> & { staleDropped: number }> {
  const groups: Array<{ question: string; golds: string[]; samples: Trajectory[] }> = [];
  let staleDropped = 0;
  for (const { q, r } of parts) {
    const trajs = await app.objects.get<Trajectory[]>(r.trajectories);
    app.objects.forget(r.trajectories);
    q.forEach((question, g) => {
      const samples = trajs.filter((t) => t.group === g);
      if (fresh && !samples.every(fresh)) staleDropped += samples.length;
      else groups.push({ question: question.question, golds: question.golds, samples });
    });
  }
  return { ...scoreSamples(groups, reward), staleDropped };
}

/**
 * One update on the kept samples: slices balanced by tokens, one per rank, by
 * reference (under the key prefix `keys`, when given), deleted once trained on.
 */
export async function update(svc: StepServices, kept: ScoredSample[], keys?: string): Promise<TrainResult[]> {
  if (kept.length === 0) return [];
  const slices = buildSlices(kept.map((s) => ({ tokens: s.tokens, mask: s.mask, logprobs: s.logprobs, advantage: s.advantage })), svc.opts.trainers);
  const refs = await Promise.all(slices.map((s, rank) => svc.app.objects.put(s, { key: keys === undefined ? undefined : `${keys}slice-${rank}`, scratch: true })));
  try {
    return await svc.trainer.broadcast("train", refs.map((ref) => [ref] as [ObjectRef]));
  } finally {
    await Promise.all(refs.map((ref) => svc.app.objects.delete(ref.key)));
  }
}

/** The training questions of `step`: a seeded draw, the same for the same run seed and step. */
export function stepQuestions(o: SearchR1Options, task: PreparedTask, step: number): Question[] {
  const r = rng(o.seed * 100_003 + step);
  return Array.from({ length: o.promptsPerStep }, () => task.train[Math.floor(r() * task.train.length)]!);
}

/** Launches the rollouts of step `step` (its seeded questions, G samples each, under the step's keys); what RolloutsAhead starts. */
export function stepRollouts(svc: StepServices, step: number): Promise<RolloutParts> {
  const o = svc.opts;
  return rollouts(svc, stepQuestions(o, svc.task, step), o.groupSize, o.temperature, step, stepKeys(o.name, step));
}

/**
 * Runs step number `step`: rollouts (started now, or ahead of the step with
 * a max lag ≥ 1, in which case the next steps' rollouts start here too),
 * reward, advantages, update, publication.
 */
export async function runStep(svc: StepServices, step: number, reward: RewardFn): Promise<StepResult> {
  const ahead = svc.ahead;
  const t0 = performance.now();
  const pending = ahead.take(step);
  ahead.prefetch(step);
  const parts = await pending;
  // Every earlier step has published: this is the version the update trains from.
  const version = ahead.policyVersion;
  const k = ahead.maxLag;
  const scored = await collect(svc.app, parts, reward, k === 0 ? undefined : (t) => lagOf(t, version) <= k);
  const t1 = performance.now();
  const kept = scored.samples.filter((s) => s.kept);
  const trained = await update(svc, kept, stepKeys(svc.opts.name, step));
  const t2 = performance.now();
  const published = trained[0]?.publish;
  if (published) ahead.policyVersion = published.version;
  const lag = lagStats(scored.samples, version);
  const metrics: StepMetrics = {
    step,
    reward_mean: mean(scored.samples.map((s) => s.reward)),
    em: mean(scored.samples.map((s) => emReward(s.response, s.golds))),
    searches_per_sample: mean(scored.samples.map((s) => s.searches.length)),
    groups_kept: scored.groupsKept,
    groups_dropped: scored.groupsDropped,
    samples_trained: kept.length,
    tokens: scored.samples.reduce((a, s) => a + s.tokens.length, 0),
    rollout_s: (t1 - t0) / 1000,
    update_s: (t2 - t1) / 1000,
    publish_bytes: published?.bytes ?? 0,
    publish_s: trained[0]?.publishSeconds ?? 0,
    step_s: (t2 - t0) / 1000,
    weights_version: published?.cacheVersion ?? parts[0]?.r.weightsVersion ?? 0,
    sync_bytes: parts.reduce((n, p) => n + p.r.syncBytes, 0),
    sync_executors: new Set(parts.filter((p) => p.r.syncBytes > 0).map((p) => p.r.executorId)).size,
    sync_s: Math.max(0, ...parts.map((p) => p.r.syncSeconds)),
    max_lag: k,
    policy_version: version,
    policy_lag_max: lag.max,
    policy_lag_mean: lag.mean,
    stale_dropped: scored.staleDropped,
    rollout_busy_s: parts.reduce((n, p) => n + p.r.busySeconds, 0),
    trainer_busy_s: trained.reduce((n, t) => n + t.seconds, 0),
    rollout_util: 0,
    trainer_util: 0,
  };
  setUtilisation(metrics, svc.opts);
  const tm = trained[0]?.metrics;
  if (tm && !tm.skipped) {
    Object.assign(metrics, {
      logprob_gap: tm.gap,
      logprob_gap_max: tm.gap_max,
      kl: tm.kl,
      ratio_mean: tm.ratio,
      ratio_max: tm.ratio_max,
      clip_frac: tm.clipped,
      entropy: tm.entropy,
      loss: tm.loss,
      grad_norm: tm.grad_norm,
    });
  }
  return { metrics, trajectories: parts.map((p) => p.r.trajectories), samples: scored.samples };
}

/** Sets the utilisations from the busy seconds and `step_s` (call again when step_s changes). */
export function setUtilisation(m: StepMetrics, o: Pick<SearchR1Options, "rollouts" | "trainers">): void {
  const wall = m.step_s > 0 ? m.step_s : Number.POSITIVE_INFINITY;
  m.rollout_util = (m.rollout_busy_s ?? 0) / (wall * o.rollouts);
  m.trainer_util = (m.trainer_busy_s ?? 0) / (wall * o.trainers);
}

/** Greedy answers on the held-out questions (evaluation number `n`); exact match. Its trajectories are deleted once read. */
export async function evaluate(svc: StepServices, n = 0): Promise<EvalResult> {
  const keys = evalKeys(svc.opts.name, n);
  let scored: Awaited<ReturnType<typeof collect>>;
  try {
    scored = await collect(svc.app, await rollouts(svc, svc.task.heldOut, 1, 0, 0, keys), emReward);
  } finally {
    await svc.app.objects.delete(keys);
  }
  return {
    em: mean(scored.samples.map((s) => emReward(s.response, s.golds))),
    searchesPerSample: mean(scored.samples.map((s) => s.searches.length)),
    samples: scored.samples,
    byCategory: evalByCategory(svc.task.heldOut, scored.samples),
  };
}

function mean(xs: number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}
