/**
 * From trajectories to training slices: score each sample with the reward
 * function, compute group-relative advantages (dropping groups whose rewards
 * are all equal), and pack the kept samples into per-rank slices balanced by
 * token count.
 */
import { groupAdvantages } from "./advantages.js";
import { RewardError } from "../errors.js";
import type { RewardFn, Scored, ScoredSample, Trajectory, TrainSlice } from "../types.js";

export type { Scored, ScoredSample } from "../types.js";

/** A group of samples of one task item, as scoring takes them. */
export interface SampleGroup {
  question: string;
  golds: string[];
  samples: Trajectory[];
}

/** Options of scoreSamples. */
export interface ScoreOptions {
  /** The answer a response gives (the environment's); absent: a sample keeps the `answer` it has (rescoring), else null. */
  answerOf?: (response: string) => string | null;
  /** The step scored, for errors. */
  step?: number;
}

/**
 * Scores samples grouped by prompt and computes their group advantages. A
 * sample whose episode failed in the environment (finish "error") is not
 * scored: reward 0, never trained on, and its group's advantages are
 * computed over the other samples. A reward that throws or is not finite is
 * a RewardError naming the step, the sample and its question.
 */
export function scoreSamples(groups: SampleGroup[], reward: RewardFn, opts: ScoreOptions = {}): Scored {
  const at = opts.step === undefined ? "" : ` at step ${opts.step}`;
  const rewards = groups.map((g) =>
    g.samples.map((s, i) => {
      if (s.finish === "error") return undefined;
      let r: number;
      try {
        r = reward(s.response, g.golds);
      } catch (err) {
        throw new RewardError(`the reward function threw on sample ${i} of '${g.question}'${at}: ${(err as Error)?.message ?? String(err)}`, { step: opts.step, sample: i, question: g.question, cause: err });
      }
      if (typeof r !== "number" || !Number.isFinite(r)) {
        throw new RewardError(`the reward function returned ${String(r)} for sample ${i} of '${g.question}'${at}; it must return a finite number`, { step: opts.step, sample: i, question: g.question });
      }
      return r;
    }),
  );
  // Advantages over the samples the environment did not fail on (a group left with none, or with equal rewards, is dropped).
  const valid = rewards.map((rs) => rs.filter((r): r is number => r !== undefined));
  const scorable = valid.map((rs, gi) => ({ rs, gi })).filter((x) => x.rs.length > 0);
  const adv = groupAdvantages(scorable.map((x) => x.rs));
  const keptAt = new Map(adv.kept.map((j, k) => [scorable[j]!.gi, k]));
  const samples: ScoredSample[] = [];
  groups.forEach((g, gi) => {
    const k = keptAt.get(gi);
    let v = 0;
    g.samples.forEach((s, i) => {
      const r = rewards[gi]![i];
      const advantage = r === undefined || k === undefined ? 0 : adv.advantages[k]![v]!;
      if (r !== undefined) v++;
      samples.push({
        ...s,
        question: g.question,
        golds: g.golds,
        answer: opts.answerOf ? opts.answerOf(s.response) : ((s as Partial<ScoredSample>).answer ?? null),
        reward: r ?? 0,
        advantage,
        kept: k !== undefined && r !== undefined,
      });
    });
  });
  return { samples, groupsKept: adv.kept.length, groupsDropped: groups.length - adv.kept.length };
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
