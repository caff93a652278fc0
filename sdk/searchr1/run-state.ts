/**
 * A run's state in the object cache, so that a driver that comes back (a
 * restarted notebook kernel, a second process) finds the run as it was: its
 * id, step counter, metrics history, the rollout setup its executors hold,
 * and the fingerprint of the options it was made with. The trainers know the
 * run id they were set up for; together that is enough to reattach without
 * re-initialising anything.
 */
import { createHash } from "node:crypto";
import type { ObjectRef } from "../cache/object-cache.js";
import type { App } from "../runtime/app.js";
import { ObjectNotFoundError } from "../errors/index.js";
import type { SearchR1Options } from "./options.js";
import type { StepMetrics } from "./pipeline.js";

/** What is stored under `searchr1/<name>/run`. */
export interface RunState {
  runId: string;
  fingerprint: string;
  step: number;
  history: StepMetrics[];
  rolloutSetup: ObjectRef;
}

/** The options that make two runs the same run (what the name, output folder and logging do not change). */
const SAME_RUN: ReadonlyArray<keyof SearchR1Options> = [
  "model", "data", "seed", "promptsPerStep", "promptsPerTask", "groupSize", "rollouts", "trainers", "evalSize", "lr", "klCoef",
  "gradClip", "microBatch", "maxSearches", "topK", "maxTurnTokens", "maxResponseTokens", "temperature", "policy", "bootstrapSteps", "bootstrapMixedShare",
  "rolloutResreq", "trainerResreq", "rolloutDtype", "threads", "backend", "rebaseEvery", "rebaseShare",
];

/** A digest of the options that define a run, and their values (to say what differs). */
export function runFingerprint(o: SearchR1Options): { digest: string; values: Record<string, unknown> } {
  const values = Object.fromEntries(SAME_RUN.map((k) => [k, o[k]]));
  return { digest: createHash("sha256").update(JSON.stringify(values)).digest("hex").slice(0, 32), values };
}

/** The cache key of a run's state. */
export function runStateKey(name: string): string {
  return `searchr1/${name}/run`;
}

/** The stored state of run `name`, or undefined when there is none. */
export async function readRunState(app: App, name: string): Promise<(RunState & { values?: Record<string, unknown> }) | undefined> {
  try {
    return await app.objects.get<RunState>(runStateKey(name));
  } catch (err) {
    if (err instanceof ObjectNotFoundError) return undefined;
    throw err;
  }
}

/** Writes the state (replacing what was there); returns its ref. */
export async function writeRunState(app: App, name: string, state: RunState & { values: Record<string, unknown> }, held?: ObjectRef): Promise<ObjectRef> {
  if (held) return app.objects.update(held, state);
  try {
    return await app.objects.put(state, { key: runStateKey(name), pin: true });
  } catch {
    return app.objects.update(runStateKey(name), state);
  }
}
