/**
 * Rollouts ahead of the update, with a bounded policy lag. The trainers'
 * policy version v counts their publications. With `maxLag` K, the rollouts
 * of step t may start once step t − K − 1 has published: they then sample
 * with a version of at least the one after step t − K − 1, and step t trains
 * at most K publications later, so no trajectory it trains on lags by more
 * than K. K = 0 starts a step's rollouts only when its own step begins (the
 * synchronous loop); K ≥ 1 starts the next K steps' rollouts at the
 * beginning of a step, so the rollout executors work on them while the
 * trainers update. A rollout executor takes its weights when a call starts
 * (rollout-service.ts), so weights never change in the middle of a sample.
 *
 * The launch rule bounds the lag by construction; the driver still checks
 * every trajectory's version against the trainers' when it trains (a rollout
 * that skipped its weight sync, or a lag lowered between steps), and at
 * K ≥ 1 drops stale ones and counts them.
 */
import { HearthError } from "../../errors/index.js";
import type { Trajectory } from "../services/rollout-service.js";

/** Starts the rollouts of a step (the pipeline's `rollouts` on the step's questions) and resolves to its parts. */
export type LaunchRollouts<P> = (step: number) => Promise<P>;

/**
 * The rollout phases in flight for the steps to come, and the trainers'
 * current policy version. One per run; `take` and `prefetch` are called by
 * the step pipeline, `published` after each publication.
 */
export class RolloutsAhead<P> {
  private readonly pending = new Map<number, Promise<P>>();
  /** The trainers' latest published version (what the next update trains from). */
  policyVersion = 0;
  /** No rollouts are started past this step (train(n) sets it; Infinity: no bound). */
  horizon = Number.POSITIVE_INFINITY;

  constructor(
    private readonly launch: LaunchRollouts<P>,
    private lag: number,
  ) {
    checkLag(lag);
  }

  /** The allowed lag K. */
  get maxLag(): number {
    return this.lag;
  }

  /**
   * Changes K between steps. Rollouts already started for later steps are
   * kept; a lower K may make some of their trajectories stale, which the
   * driver then drops.
   */
  set maxLag(k: number) {
    checkLag(k);
    this.lag = k;
  }

  /** Step `step`'s rollouts: the ones started ahead, or started now. */
  take(step: number): Promise<P> {
    const p = this.pending.get(step) ?? this.launch(step);
    this.pending.delete(step);
    return p;
  }

  /**
   * Called when step `step` begins (every earlier step has published):
   * starts the rollouts of steps step+1 … step+K not started yet, in order,
   * up to the horizon. Nothing at K = 0.
   */
  prefetch(step: number): void {
    for (let t = step + 1; t <= step + this.lag && t <= this.horizon; t++) {
      if (this.pending.has(t)) continue;
      const p = this.launch(t);
      // Held until its step takes it; a failure surfaces there (or is dropped with `discard`).
      p.catch(() => undefined);
      this.pending.set(t, p);
    }
  }

  /** Steps whose rollouts are in flight ahead of their step. */
  get ahead(): number[] {
    return [...this.pending.keys()].sort((a, b) => a - b);
  }

  /** Forgets the rollouts started ahead (e.g. before closing): waits until they settle, ignoring their results. */
  async discard(): Promise<void> {
    const all = [...this.pending.values()];
    this.pending.clear();
    await Promise.allSettled(all);
  }
}

/** How far behind the trainers' version `v` a trajectory is. */
export function lagOf(t: Pick<Trajectory, "policyVersion">, v: number): number {
  return v - t.policyVersion;
}

/** Lag statistics of the trajectories a step trains on. */
export interface LagStats {
  max: number;
  mean: number;
}

/** Max and mean lag of `trajs` behind version `v` (0 and 0 when empty). */
export function lagStats(trajs: ReadonlyArray<Pick<Trajectory, "policyVersion">>, v: number): LagStats {
  if (trajs.length === 0) return { max: 0, mean: 0 };
  let max = 0;
  let sum = 0;
  for (const t of trajs) {
    const l = lagOf(t, v);
    max = Math.max(max, l);
    sum += l;
  }
  return { max, mean: sum / trajs.length };
}

function checkLag(k: number): void {
  if (!Number.isInteger(k) || k < 0) throw new HearthError(`--max-lag must be a whole number ≥ 0; got ${String(k)}`);
}
