/**
 * From trajectories to training slices: score each sample with the reward
 * function, compute group-relative advantages (dropping groups whose rewards
 * are all equal), and pack the kept samples into per-rank slices balanced by
 * token count.
 */
import { groupAdvantages } from "./advantages.js";
import { extractAnswer, type RewardFn } from "../../envs/searchr1/reward.js";
import type { Trajectory } from "../services/rollout-service.js";
import type { TrainSlice } from "../services/trainer-service.js";

/** A scored sample: a trajectory with its reward and (if kept) advantage. */
export interface ScoredSample extends Trajectory {
  question: string;
  golds: string[];
  answer: string | null;
  reward: number;
  advantage: number;
  kept: boolean;
}

/** Group statistics of one step. */
export interface Scored {
  samples: ScoredSample[];
  groupsKept: number;
  groupsDropped: number;
}

/** Scores samples grouped by prompt; a reward that throws or is not finite is a clear error. */
export function scoreSamples(groups: Array<{ question: string; golds: string[]; samples: Trajectory[] }>, reward: RewardFn): Scored {
  const rewards = groups.map((g) =>
    g.samples.map((s, i) => {
      let r: number;
      try {
        r = reward(s.response, g.golds);
      } catch (err) {
        throw new RangeError(`the reward function threw on sample ${i} of '${g.question}': ${(err as Error).message}`, { cause: err });
      }
      if (typeof r !== "number" || !Number.isFinite(r)) {
        throw new RangeError(`the reward function returned ${String(r)} for sample ${i} of '${g.question}'; it must return a finite number`);
      }
      return r;
    }),
  );
  const adv = groupAdvantages(rewards);
  const keptAt = new Map(adv.kept.map((g, j) => [g, j]));
  const samples: ScoredSample[] = [];
  groups.forEach((g, gi) => {
    const j = keptAt.get(gi);
    g.samples.forEach((s, i) =>
      samples.push({
        ...s,
        question: g.question,
        golds: g.golds,
        answer: extractAnswer(s.response),
        reward: rewards[gi]![i]!,
        advantage: j === undefined ? 0 : adv.advantages[j]![i]!,
        kept: j !== undefined,
      }),
    );
  });
  return { samples, groupsKept: adv.kept.length, groupsDropped: adv.dropped };
}

/** A row to train: tokens with mask, rollout logprobs and one advantage. */
export interface TrainRow {
  tokens: ArrayLike<number>;
  mask: ArrayLike<number>;
  logprobs?: ArrayLike<number>;
  advantage: number;
}

/**
 * Splits rows over `ranks` trainers (longest first onto the lightest rank)
 * and pads each slice to its longest row; padding is masked out.
 */
export function buildSlices(rows: TrainRow[], ranks: number): TrainSlice[] {
  const order = rows.map((r, i) => i).sort((a, b) => rows[b]!.tokens.length - rows[a]!.tokens.length);
  const buckets: number[][] = Array.from({ length: ranks }, () => []);
  const load = new Array<number>(ranks).fill(0);
  for (const i of order) {
    let best = 0;
    for (let k = 1; k < ranks; k++) if (load[k]! < load[best]!) best = k;
    buckets[best]!.push(i);
    load[best]! += rows[i]!.tokens.length;
  }
  return buckets.map((idx) => {
    const cols = Math.max(1, ...idx.map((i) => rows[i]!.tokens.length));
    const n = idx.length;
    const slice: TrainSlice = {
      rows: n,
      cols,
      tokens: new Int32Array(n * cols),
      mask: new Uint8Array(n * cols),
      advantages: new Float32Array(n),
      oldLogprobs: new Float32Array(n * cols),
    };
    idx.forEach((i, row) => {
      const r = rows[i]!;
      slice.tokens.set(Array.from(r.tokens), row * cols);
      slice.mask.set(Array.from(r.mask), row * cols);
      if (r.logprobs) slice.oldLogprobs.set(Array.from(r.logprobs), row * cols);
      slice.advantages[row] = r.advantage;
    });
    return slice;
  });
}
