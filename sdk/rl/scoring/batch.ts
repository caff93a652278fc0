/**
 * From trajectories to training slices: score each sample with the reward
 * function, compute group-relative advantages (dropping groups whose rewards
 * are all equal), and pack the kept samples into per-rank slices balanced by
 * token count.
 */
import { groupAdvantages } from "./advantages.js";
import { RewardError, TrajectoryError } from "../errors.js";
import { createHash } from "node:crypto";
import type { RewardFn, SampledRun, Scored, ScoredSample, Trajectory, TrainSlice } from "../types.js";

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
 *
 * Agent episodes: an episode split into several sequences (`episode`) is one
 * sample of its group, scored once (the agent's own reward when it gave
 * one, else the reward of its final answer, `final`); every sequence of it
 * gets that reward and advantage. A sequence with no sampled token is never
 * trained on.
 */
export function scoreSamples(groups: SampleGroup[], reward: RewardFn, opts: ScoreOptions = {}): Scored {
  const at = opts.step === undefined ? "" : ` at step ${opts.step}`;
  // Each group's episodes: the indices of their samples (one each, unless an agent episode was split).
  const episodes = groups.map((g) => {
    const byKey = new Map<string, number[]>();
    g.samples.forEach((s, i) => {
      const key = s.episode ? `s:${s.episode.session}` : `i:${i}`;
      byKey.set(key, [...(byKey.get(key) ?? []), i]);
    });
    return [...byKey.values()];
  });
  const rewards = groups.map((g, gi) =>
    episodes[gi]!.map((idx, e) => {
      const s = g.samples[idx[0]!]!;
      if (s.finish === "error") return undefined;
      if (s.agentReward !== undefined) return s.agentReward;
      let r: number;
      try {
        r = reward(s.final ?? s.response, g.golds);
      } catch (err) {
        throw new RewardError(`the reward function threw on sample ${e} of '${g.question}'${at}: ${(err as Error)?.message ?? String(err)}`, { step: opts.step, sample: e, question: g.question, cause: err });
      }
      if (typeof r !== "number" || !Number.isFinite(r)) {
        throw new RewardError(`the reward function returned ${String(r)} for sample ${e} of '${g.question}'${at}; it must return a finite number`, { step: opts.step, sample: e, question: g.question });
      }
      return r;
    }),
  );
  // Advantages over the episodes the environment did not fail on (a group left with none, or with equal rewards, is dropped).
  const valid = rewards.map((rs) => rs.filter((r): r is number => r !== undefined));
  const scorable = valid.map((rs, gi) => ({ rs, gi })).filter((x) => x.rs.length > 0);
  const adv = groupAdvantages(scorable.map((x) => x.rs));
  const keptAt = new Map(adv.kept.map((j, k) => [scorable[j]!.gi, k]));
  const samples: ScoredSample[] = [];
  groups.forEach((g, gi) => {
    const k = keptAt.get(gi);
    const perSample = new Array<{ r: number | undefined; a: number }>(g.samples.length);
    let v = 0;
    episodes[gi]!.forEach((idx, e) => {
      const r = rewards[gi]![e];
      const a = r === undefined || k === undefined ? 0 : adv.advantages[k]![v]!;
      if (r !== undefined) v++;
      for (const i of idx) perSample[i] = { r, a };
    });
    g.samples.forEach((s, i) => {
      const { r, a } = perSample[i]!;
      samples.push({
        ...s,
        question: g.question,
        golds: g.golds,
        answer: opts.answerOf ? opts.answerOf(s.final ?? s.response) : ((s as Partial<ScoredSample>).answer ?? null),
        reward: r ?? 0,
        advantage: a,
        kept: k !== undefined && r !== undefined && s.mask.some((m) => m === 1),
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
  /** Where the sampled ids are and the engine's digests of them (agent episodes): the trainer checks them. */
  sampled?: SampledRun[];
  label?: string;
}

/** sha256 (hex) of ids as int32 little-endian: what the engine computes of the ids it sampled. */
export function idsDigest(ids: ArrayLike<number>, from = 0, n = ids.length - from): string {
  const buf = Buffer.alloc(4 * n);
  for (let i = 0; i < n; i++) buf.writeInt32LE(ids[from + i]!, 4 * i);
  return createHash("sha256").update(buf).digest("hex");
}

/**
 * Checks a slice's rows against their sampled runs: every run's ids have
 * mask 1 and the engine's digest, and no other id has mask 1. Throws naming
 * the sample and the run that differs (a sample whose trained ids are not
 * the sampled ones must not train).
 */
export function checkSampled(slice: TrainSlice): void {
  if (!slice.sampled) return;
  for (let r = 0; r < slice.rows; r++) {
    const runs = slice.sampled[r];
    if (!runs) continue;
    const label = slice.labels?.[r] ?? `row ${r}`;
    const row = slice.tokens.subarray(r * slice.cols, (r + 1) * slice.cols);
    const mask = slice.mask.subarray(r * slice.cols, (r + 1) * slice.cols);
    let covered = 0;
    runs.forEach((run, k) => {
      if (run.at + run.n > slice.cols) throw new TrajectoryError(`sample ${label}: its sampled run ${k} (${run.n} ids at ${run.at}) lies past its ${slice.cols} columns: the trained ids are not the sampled ones`, { sample: label });
      for (let t = run.at; t < run.at + run.n; t++) {
        if (mask[t] !== 1) throw new TrajectoryError(`sample ${label}: id ${t} of sampled run ${k} has mask ${mask[t]}, not 1`, { sample: label });
      }
      const d = idsDigest(row, run.at, run.n);
      if (d !== run.digest) throw new TrajectoryError(`sample ${label}: the ids of sampled run ${k} (${run.n} at ${run.at}) differ from those its engine sampled (digest ${d.slice(0, 12)} ≠ ${run.digest.slice(0, 12)}): refusing to train on them`, { sample: label });
      covered += run.n;
    });
    let ones = 0;
    for (let t = 0; t < slice.cols; t++) ones += mask[t] === 1 ? 1 : 0;
    if (ones !== covered) throw new TrajectoryError(`sample ${label}: ${ones} ids have mask 1 but its engine sampled ${covered}: only sampled ids may be trained`, { sample: label });
  }
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
  const withSampled = rows.some((r) => r.sampled !== undefined);
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
    if (withSampled) {
      slice.sampled = idx.map((i) => rows[i]!.sampled ?? null);
      slice.labels = idx.map((i) => rows[i]!.label ?? `row ${i}`);
    }
    return slice;
  });
}
