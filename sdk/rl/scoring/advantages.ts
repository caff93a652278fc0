/**
 * GRPO group-relative advantages: each prompt's G samples are scored against
 * their own group, `A_i = (r_i − mean(r)) / (std(r) + eps)`.
 *
 * `std` is the population standard deviation (divide by G, not G − 1) and
 * `eps` defaults to 1e-6, as in the reference verl GRPO advantage estimator.
 * A group whose rewards are all equal carries no learning signal (every
 * advantage would be 0), so it is dropped and counted rather than trained on.
 *
 * ```ts
 * const { advantages, kept, dropped } = groupAdvantages([[1, 0, 0, 1], [0, 0, 0, 0]]);
 * // advantages: [[1, -1, -1, 1]] (to 1e-6), kept: [0], dropped: 1
 * ```
 */
import { HearthError } from "../../errors/index.js";

/** A reward is NaN or infinite, a group is empty, or the input is not a list of lists. */
export class AdvantageError extends HearthError {
  override name = "AdvantageError";
  constructor(
    message: string,
    /** Index of the offending group in the input, when there is one. */
    readonly group?: number,
    /** Index of the offending sample inside its group, when there is one. */
    readonly sample?: number,
  ) {
    super(message);
  }
}

/** Options of {@link groupAdvantages}. */
export interface GroupAdvantageOptions {
  /** Added to the standard deviation before dividing; default 1e-6 (verl's). */
  eps?: number;
}

/** What {@link groupAdvantages} returns: the kept groups only, aligned with `kept`. */
export interface GroupAdvantages {
  /** `advantages[j][i]` is the advantage of sample i of input group `kept[j]`. */
  advantages: number[][];
  /** Input indices of the groups kept, ascending. */
  kept: number[];
  /** How many groups were dropped because all their rewards were equal. */
  dropped: number;
  /** Mean reward of each kept group, aligned with `kept`. */
  means: number[];
  /** Population standard deviation of each kept group, aligned with `kept`. */
  stds: number[];
}

/** The verl GRPO default for `eps`. */
export const DEFAULT_ADVANTAGE_EPS = 1e-6;

/**
 * Group-relative advantages for rewards grouped per prompt (`rewards[g][i]`:
 * sample i of prompt g). Groups whose rewards are all exactly equal, including
 * groups of one sample, are dropped. Throws {@link AdvantageError} naming the
 * group and sample for a NaN or infinite reward, and for an empty group.
 */
export function groupAdvantages(rewards: readonly (readonly number[])[], options: GroupAdvantageOptions = {}): GroupAdvantages {
  const eps = options.eps ?? DEFAULT_ADVANTAGE_EPS;
  if (!Number.isFinite(eps) || eps < 0) throw new AdvantageError(`eps must be a finite number ≥ 0, got ${eps}`);
  checkRewards(rewards);

  const out: GroupAdvantages = { advantages: [], kept: [], dropped: 0, means: [], stds: [] };
  for (let g = 0; g < rewards.length; g++) {
    const group: readonly number[] = rewards[g];
    if (group.every((r) => r === group[0])) {
      out.dropped++;
      continue;
    }
    const mean = group.reduce((s, r) => s + r, 0) / group.length;
    const std = Math.sqrt(group.reduce((s, r) => s + (r - mean) ** 2, 0) / group.length);
    out.advantages.push(group.map((r) => (r - mean) / (std + eps)));
    out.kept.push(g);
    out.means.push(mean);
    out.stds.push(std);
  }
  return out;
}

/**
 * Flattens per-group values in group order (`[[a, b], [c]]` → `[a, b, c]`),
 * e.g. the advantages of the kept groups into one value per trained sample.
 */
export function flattenGroups(groups: readonly (readonly number[])[]): number[] {
  const flat: number[] = [];
  for (const g of groups) for (const v of g) flat.push(v);
  return flat;
}

function checkRewards(rewards: readonly (readonly number[])[]): void {
  if (!Array.isArray(rewards)) throw new AdvantageError("rewards must be an array of groups (number[][])");
  for (let g = 0; g < rewards.length; g++) {
    const group = rewards[g];
    if (!Array.isArray(group)) throw new AdvantageError(`reward group ${g} is not an array`, g);
    if (group.length === 0) throw new AdvantageError(`reward group ${g} is empty; every prompt needs at least one sample`, g);
    for (let i = 0; i < group.length; i++) {
      const r: unknown = group[i];
      if (typeof r !== "number" || !Number.isFinite(r)) {
        throw new AdvantageError(`reward of sample ${i} in group ${g} is ${String(r)}; rewards must be finite numbers`, g, i);
      }
    }
  }
}
