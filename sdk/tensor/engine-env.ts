/**
 * A tensor engine's environment. hearth starts its own Node processes with
 * glibc settings that keep 8 MiB object chunks in the heap
 * (sdk/runtime/process-tuning.ts) and names the ones it added in
 * TUNED_FOR_NODE_ENV; an engine is started without those (torch frees large
 * tensors often: with them, a 0.5B rollout engine peaked at 2.2 GiB RSS in
 * one `bench weights` run, 1.4 GiB in the run before without them). A
 * user's own MALLOC_* settings stay.
 */

/** Names the chunk variables tunedEnv added (not the user's), which a tensor engine is started without. */
export const TUNED_FOR_NODE_ENV = "HEARTH_TUNED_FOR_NODE";

/** `env` without the variables TUNED_FOR_NODE_ENV names (and without it). */
export function engineEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const out = { ...env };
  for (const k of (env[TUNED_FOR_NODE_ENV] ?? "").split(",")) if (k !== "") delete out[k];
  delete out[TUNED_FOR_NODE_ENV];
  return out;
}
