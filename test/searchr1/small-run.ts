/**
 * The small Search-R1 run the end-to-end tests share: the tiny model on the
 * easy synthetic task, 4 prompts a step in groups of 4, a 4-step warm start, no periodic eval, and
 * sampling hot so that the barely warmed-up policy writes varied responses.
 */
import type { RunOptions } from "../../sdk/rl/run/run.js";

/** A reward that varies within groups even for a barely trained policy (exact match would be 0 everywhere): every step then trains. */
export const lengthParity = (response: string): number => (response.length % 2 === 0 ? 1 : 0);

/** Options of a small run named `name` on the head at `head`, writing to `out`; `extra` wins. */
export function smallRun(head: string, name: string, out: string, extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return {
    head,
    name,
    out,
    promptsPerStep: 4,
    promptsPerTask: 2,
    groupSize: 4,
    // The easy task's 2-layer model: these tests check the loop's mechanics, not what it learns.
    data: "synthetic-easy",
    evalSize: 8,
    evalEvery: 0,
    bootstrapSteps: 4,
    seed: 7,
    // With lengthParity, every step of such a hot sampler trains.
    temperature: 3,
    log: () => undefined,
    ...extra,
  };
}
