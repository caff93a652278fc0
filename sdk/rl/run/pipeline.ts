/**
 * One step as a pipeline of plain functions over the run's services, the
 * same for every environment: roll task items out on the pool (`rollouts`),
 * score the episodes with the reward and compute group advantages
 * (`collect`), train the gang on the kept samples (`trainOn`), and publish
 * the new weights (`publish`); `runStep` is those four, and the run's
 * public `rollout` / `score` / `trainOn` / `publish` are the same calls for
 * a loop of one's own. With a max lag K ≥ 1 the next K steps' rollouts are
 * already running while this step updates (overlap.ts); with K = 0 the step
 * is the synchronous loop. Nothing here knows which environment it runs:
 * the task names its calls (EnvWords) and says what counts as right.
 */
import type { ObjectRef } from "../../cache/object-cache.js";
import { deriveSeed } from "../../tensor/seeds.js";
import { buildSlices, scoreSamples } from "../scoring/batch.js";
import { rng } from "../random.js";
import type { RunOptions } from "./options.js";
import type { PreparedTask } from "./recipe.js";
import { lagOf, lagStats } from "./overlap.js";
import { limitsOf, type RolloutParts, type StepServices } from "./step-services.js";
import { agentRollouts, openEpisodeSessions } from "./agent-rollouts.js";
import { agentExamples, agentMetrics } from "./alarms.js";

export { limitsOf, type RolloutParts, type StepServices } from "./step-services.js";
import { evalKeys, stepKeys } from "../state/run-objects.js";
import type { CategoryEval, EvalResult, PublishStats, RewardFn, RolloutItem, Scored, ScoredSample, StepMetrics, StepResult, TaskItem, TrainResult, Trajectory } from "../types.js";

export type { CategoryEval, EvalResult, StepMetrics, StepResult } from "../types.js";

/**
 * Rolls out task items (G samples each) across the pool, `promptsPerTask`
 * per call. Sample g of the item at position p of step `step` samples with
 * deriveSeed(run seed, step, p, g): the same tokens whichever executor takes
 * the call, in whatever batch, whenever. Each call's trajectories object
 * goes under the key prefix `keys` (run-objects.ts), whose owner deletes it.
 */
export async function rollouts(svc: StepServices, items: readonly TaskItem[], groupSize: number, temperature: number, step: number, keys?: string): Promise<RolloutParts> {
  // An agent run's episodes are its agent's, on the endpoint (run here, or in the executors); the seeds are the same.
  if (svc.agentFn !== undefined) {
    // The leases end by themselves shortly after the agents' deadline, should this driver go away mid-step.
    const sessions = await openEpisodeSessions(svc, items, { groupSize, temperature, step, keys, leaseMs: svc.opts.agentTimeoutMs + 30_000 });
    await sessions.run(svc.agentFn);
    return sessions.collect();
  }
  if (svc.opts.agent !== undefined) return agentRollouts(svc, svc.opts.agent, items, groupSize, temperature, step, keys, svc.agentRevision ?? 0);
  const per = svc.opts.promptsPerTask;
  const chunks: TaskItem[][] = [];
  for (let i = 0; i < items.length; i += per) chunks.push(items.slice(i, i + per));
  return Promise.all(
    chunks.map(async (q, i) => {
      const batch: RolloutItem[] = q.map((x, j) => ({ id: x.id, question: x.question, seed: deriveSeed(svc.opts.seed, step, i * per + j) }));
      const r = await svc.rollout.call("rollout", { setup: svc.rolloutSetup, weights: svc.weightsKey, items: batch, groupSize, limits: limitsOf(svc.opts, temperature, step * 1000 + i), keys });
      return { q, r };
    }),
  );
}

/** Scored samples, the groups kept and dropped, and the trajectories left out for lagging. */
export type Collected = Scored & { staleDropped: number };

/**
 * Fetches the trajectories of rollout calls and scores them with `reward`.
 * With `fresh`, a group with a trajectory it refuses is left out (a group's
 * samples come from one call, so they share a policy version) and counted.
 * The client keeps no copy (the scored samples hold what was read); the
 * objects stay for their owner to delete.
 */
export async function collect(svc: Pick<StepServices, "app" | "task">, parts: RolloutParts, reward: RewardFn, opts: { fresh?: (t: Trajectory) => boolean; step?: number } = {}): Promise<Collected> {
  const groups: Array<{ question: string; golds: string[]; samples: Trajectory[] }> = [];
  let staleDropped = 0;
  for (const { q, r } of parts) {
    const trajs = await svc.app.objects.get<Trajectory[]>(r.trajectories);
    svc.app.objects.forget(r.trajectories);
    q.forEach((item, g) => {
      const samples = trajs.filter((t) => t.group === g);
      if (opts.fresh && !samples.every(opts.fresh)) staleDropped += samples.length;
      else groups.push({ question: item.question, golds: item.golds, samples });
    });
  }
  return { ...scoreSamples(groups, reward, { answerOf: svc.task.environment.answerOf, step: opts.step }), staleDropped };
}

/**
 * One update of every trainer rank on the kept samples, without publishing:
 * slices balanced by tokens, one per rank, by reference (under the key
 * prefix `keys`, when given), deleted once trained on. No samples: no update.
 */
export async function trainOn(svc: StepServices, kept: readonly ScoredSample[], keys?: string): Promise<TrainResult[]> {
  if (kept.length === 0) return [];
  const slices = buildSlices(kept.map((s) => ({ tokens: s.tokens, mask: s.mask, logprobs: s.logprobs, advantage: s.advantage, ...(s.sampled ? { sampled: s.sampled, label: `${s.itemId}#${s.episode?.sample ?? "?"}` } : {}) })), svc.opts.trainers);
  const refs = await Promise.all(slices.map((s, rank) => svc.app.objects.put(s, { key: keys === undefined ? undefined : `${keys}slice-${rank}`, scratch: true })));
  try {
    const res = await svc.trainer.broadcast("train", refs.map((ref) => [ref, false] as [ObjectRef, boolean]));
    svc.updates++;
    return res;
  } finally {
    await Promise.all(refs.map((ref) => svc.app.objects.delete(ref.key)));
  }
}

/** Rank 0 publishes the trainers' weights (what the next rollouts sync to); the run's policy version follows. */
export async function publish(svc: StepServices): Promise<{ publish?: PublishStats; publishSeconds?: number }> {
  const res = await svc.trainer.broadcast("publish", Array.from({ length: svc.opts.trainers }, () => [] as []));
  const r0 = res.find((r) => r.rank === 0);
  if (r0?.publish) svc.ahead.policyVersion = r0.publish.version;
  // Replays of earlier versions: the publication is mirrored into the kept chains (--replay-versions).
  if (r0?.publish) await svc.history?.record(r0.publish.version);
  return { publish: r0?.publish, publishSeconds: r0?.publishSeconds };
}

/** The training items of `step`: a seeded draw, the same for the same run seed and step. */
export function stepItems(o: RunOptions, task: PreparedTask, step: number): TaskItem[] {
  const r = rng(o.seed * 100_003 + step);
  return Array.from({ length: o.promptsPerStep }, () => task.train[Math.floor(r() * task.train.length)]!);
}

/** Launches the rollouts of step `step` (its seeded items, G samples each, under the step's keys); what RolloutsAhead starts. */
export function stepRollouts(svc: StepServices, step: number): Promise<RolloutParts> {
  const o = svc.opts;
  return rollouts(svc, stepItems(o, svc.task, step), o.groupSize, o.temperature, step, stepKeys(o.name, step));
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
  const scored = await collect(svc, parts, reward, { fresh: k === 0 ? undefined : (t) => lagOf(t, version) <= k, step });
  const t1 = performance.now();
  const kept = scored.samples.filter((s) => s.kept);
  const trained = await trainOn(svc, kept, stepKeys(svc.opts.name, step));
  const { publish: published, publishSeconds } = trained.length > 0 ? await publish(svc) : { publish: undefined, publishSeconds: undefined };
  const t2 = performance.now();
  const metrics = stepMetrics(svc, step, { parts, scored, kept, trained, published, publishSeconds, version, t0, t1, t2 });
  const examples = agentExamples(parts.map((p) => p.r.agent));
  return { metrics, trajectories: parts.map((p) => p.r.trajectories), samples: scored.samples, ...(Object.keys(examples).length > 0 ? { examples } : {}) };
}

/** A step's metrics from its parts (the environment names the tool-call field). */
function stepMetrics(
  svc: StepServices,
  step: number,
  s: { parts: RolloutParts; scored: Collected; kept: ScoredSample[]; trained: TrainResult[]; published?: PublishStats; publishSeconds?: number; version: number; t0: number; t1: number; t2: number },
): StepMetrics {
  const env = svc.task.environment;
  const { parts, scored, trained, published } = s;
  const lag = lagStats(scored.samples, s.version);
  const agent = agentMetrics(parts.map((p) => p.r.agent));
  // Agent failures are counted per episode (agent_failures), not per sequence.
  const errors = agent.agent_sessions !== undefined ? 0 : scored.samples.filter((x) => x.finish === "error").length;
  const groups = scored.groupsKept + scored.groupsDropped;
  const metrics: StepMetrics = {
    step,
    reward_mean: mean(scored.samples.map((x) => x.reward)),
    em: mean(scored.samples.map((x) => env.exactMatch(x.response, x.golds))),
    [`${env.words.calls}_per_sample`]: mean(scored.samples.map((x) => x.calls.length)),
    groups_kept: scored.groupsKept,
    groups_dropped: scored.groupsDropped,
    samples_trained: s.kept.length,
    tokens: scored.samples.reduce((a, x) => a + x.tokens.length, 0),
    rollout_s: (s.t1 - s.t0) / 1000,
    update_s: (s.t2 - s.t1) / 1000,
    publish_bytes: published?.bytes ?? 0,
    publish_s: s.publishSeconds ?? 0,
    step_s: (s.t2 - s.t0) / 1000,
    weights_version: published?.cacheVersion ?? parts[0]?.r.weightsVersion ?? 0,
    sync_bytes: parts.reduce((n, p) => n + p.r.syncBytes, 0),
    sync_executors: new Set(parts.filter((p) => p.r.syncBytes > 0).map((p) => p.r.executorId)).size,
    sync_s: Math.max(0, ...parts.map((p) => p.r.syncSeconds)),
    max_lag: svc.ahead.maxLag,
    policy_version: s.version,
    policy_lag_max: lag.max,
    policy_lag_mean: lag.mean,
    stale_dropped: scored.staleDropped,
    ...(errors > 0 ? { env_errors: errors } : {}),
    zero_variance_share: groups === 0 ? 0 : scored.groupsDropped / groups,
    ...agent,
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
  return metrics;
}

/** Sets the utilisations from the busy seconds and `step_s` (call again when step_s changes). */
export function setUtilisation(m: StepMetrics, o: Pick<RunOptions, "rollouts" | "trainers">): void {
  const wall = m.step_s > 0 ? m.step_s : Number.POSITIVE_INFINITY;
  m.rollout_util = (m.rollout_busy_s ?? 0) / (wall * o.rollouts);
  m.trainer_util = (m.trainer_busy_s ?? 0) / (wall * o.trainers);
}

/** Greedy answers on the held-out items (evaluation number `n`); the task's exact match. Its trajectories are deleted once read. */
export async function evaluate(svc: StepServices, n = 0): Promise<EvalResult> {
  const keys = evalKeys(svc.opts.name, n);
  const right = svc.task.environment.exactMatch;
  let scored: Collected;
  try {
    scored = await collect(svc, await rollouts(svc, svc.task.heldOut, 1, 0, 0, keys), right);
  } finally {
    await svc.app.objects.delete(keys);
  }
  return {
    em: mean(scored.samples.map((s) => right(s.response, s.golds))),
    callsPerSample: mean(scored.samples.map((s) => s.calls.length)),
    samples: scored.samples,
    byCategory: evalByCategory(svc.task.heldOut, scored.samples, right),
  };
}

/** Breaks scored samples down by their item's category (items without one are left out). */
export function evalByCategory(items: readonly TaskItem[], samples: readonly ScoredSample[], right: RewardFn): CategoryEval[] {
  const categoryOf = new Map(items.map((q) => [q.id, q.category]));
  const groups = new Map<string, ScoredSample[]>();
  for (const s of samples) {
    const c = categoryOf.get(s.itemId);
    if (c === undefined) continue;
    groups.set(c, [...(groups.get(c) ?? []), s]);
  }
  return [...groups.entries()]
    .sort(([a], [b]) => a.localeCompare(b, "en", { numeric: true }))
    .map(([category, xs]) => ({ category, items: xs.length, em: mean(xs.map((s) => right(s.response, s.golds))), callsPerSample: mean(xs.map((s) => s.calls.length)) }));
}

/** The per-category EM of an evaluation as a metrics field (undefined when it has no categories). */
export function emByCategory(ev: Pick<EvalResult, "byCategory">): Record<string, number> | undefined {
  return ev.byCategory.length === 0 ? undefined : Object.fromEntries(ev.byCategory.map((c) => [c.category, c.em]));
}

function mean(xs: number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}
