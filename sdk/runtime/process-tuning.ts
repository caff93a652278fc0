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
 * Object chunks (8 MiB) are past glibc's default mmap threshold: each one
 * a process receives, reads or sends was a fresh mapping whose pages
 * fault in one by one and go back to the kernel when freed. Page faults are
 * slow on these machines: a loop reading a 944 MiB file into a new 8 MiB
 * Buffer per chunk and summing it took ~2,000 ms, ~470 ms with the chunks
 * kept in the heap (MALLOC_MMAP_THRESHOLD_ 32 MiB, freed memory kept up to
 * MALLOC_TRIM_THRESHOLD_), and a node cache's copy of 944 MiB 5.5–6.8 s →
 * 3.4–3.8 s (docs/results.md).
 *
 * HEARTH_NODE_FLAGS replaces the V8 flags (space-separated; empty for none),
 * and a MALLOC_* variable already set is kept.
 */

import { TUNED_FOR_NODE_ENV } from "../tensor/engine-env.js";

export { TUNED_FOR_NODE_ENV, engineEnv } from "../tensor/engine-env.js";

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

/** glibc's mmap threshold (its largest, 32 MiB on 64-bit): chunk buffers come from the heap and are reused. */
export const DEFAULT_MALLOC_MMAP_THRESHOLD = String(32 * 1024 * 1024);

/** Freed heap memory a process keeps before giving it back: the chunks in flight of a few transfers. */
export const DEFAULT_MALLOC_TRIM_THRESHOLD = String(128 * 1024 * 1024);

/** The variables a hearth process is started with beside its own (each unless set). */
export function tunedEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const chunks = { MALLOC_MMAP_THRESHOLD_: DEFAULT_MALLOC_MMAP_THRESHOLD, MALLOC_TRIM_THRESHOLD_: DEFAULT_MALLOC_TRIM_THRESHOLD };
  const added = Object.keys(chunks).filter((k) => env[k] === undefined || (env[TUNED_FOR_NODE_ENV] ?? "").split(",").includes(k));
  return {
    MALLOC_ARENA_MAX: env.MALLOC_ARENA_MAX ?? DEFAULT_MALLOC_ARENA_MAX,
    ...Object.fromEntries(Object.entries(chunks).map(([k, v]) => [k, added.includes(k) ? v : env[k]!])),
    [TUNED_FOR_NODE_ENV]: added.join(","),
  };
}
