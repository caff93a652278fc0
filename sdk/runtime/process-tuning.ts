/**
 * Memory settings for hearth's own long-lived Node processes: the head, the
 * agents and the executors (not a user's driver or notebook). Found with
 * `npm run bench -- soak` (docs/results.md): over 2,000 steps the rollout
 * executors' RSS grew 21–27 % per 1,000 steps while their live JavaScript
 * heap stayed at 7.6–7.9 MiB (heap snapshots at steps 305, 1,014 and 1,903).
 * The growth was V8 widening its young generation under the allocation rate
 * of rollout calls (heap total 10 → 28 MiB) and glibc keeping freed
 * message buffers in one arena per thread; with both bounded, every one of
 * these processes stayed within 3.7 % per 1,000 steps.
 *
 * HEARTH_NODE_FLAGS replaces the V8 flags (space-separated; empty for none),
 * and a MALLOC_ARENA_MAX already set is kept.
 */

/** The env variable that replaces the default V8 flags. */
export const NODE_FLAGS_ENV = "HEARTH_NODE_FLAGS";

/** A 2 MiB semi-space: a scavenge per 2 MiB allocated, a young generation that cannot grow past 6 MiB. */
export const DEFAULT_NODE_FLAGS = ["--max-semi-space-size=2"];

/** glibc arenas per process: freed buffers go back to few arenas, so they are found again. */
export const DEFAULT_MALLOC_ARENA_MAX = "2";

/** The V8 flags a hearth process is started with (before its script). */
export function nodeFlags(env: NodeJS.ProcessEnv = process.env): string[] {
  const v = env[NODE_FLAGS_ENV];
  return v === undefined ? [...DEFAULT_NODE_FLAGS] : v.split(/\s+/).filter((f) => f !== "");
}

/** The variables a hearth process is started with beside its own (MALLOC_ARENA_MAX unless set). */
export function tunedEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  return { MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX ?? DEFAULT_MALLOC_ARENA_MAX };
}
