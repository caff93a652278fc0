/**
 * A run's state in the object cache, so that a driver that comes back (a
 * restarted notebook kernel, a second process) finds the run as it was: its
 * id, step counter, metrics history, the rollout setup its executors hold,
 * and the fingerprint of the options it was made with. The trainers know the
 * run id they were set up for; together that is enough to reattach without
 * re-initialising anything. Its history grows by one entry a step (what the
 * run documents); each step appends a patch rather than rewriting it all
 * (RunStateWriter).
 */
import { createHash } from "node:crypto";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import { ObjectNotFoundError } from "../../errors/index.js";
import type { RunOptions } from "../run/options.js";
import type { StepMetrics } from "../run/pipeline.js";
import { runKeys } from "./run-objects.js";

/** What is stored under `runs/<name>/run`. */
export interface RunState {
  runId: string;
  fingerprint: string;
  step: number;
  history: StepMetrics[];
  rolloutSetup: ObjectRef;
  /**
   * The policy version the trainers had published when `step` was recorded.
   * Trainers that hold a later one took an update the run never recorded
   * (its driver was lost between the two): the run cannot go on exactly.
   * Absent in states written before it was kept.
   */
  policyVersion?: number;
  /**
   * The RL updates the trainers had taken when `step` was recorded: an
   * update never published (a loop of one's own between trainOn and
   * publish, or a driver lost between the two) is caught by it.
   */
  updates?: number;
}

/** The options that make two runs the same run (what the name, output folder and logging do not change). */
const SAME_RUN: ReadonlyArray<keyof RunOptions> = [
  "model", "data", "seed", "promptsPerStep", "promptsPerTask", "groupSize", "rollouts", "trainers", "evalSize", "lr", "klCoef",
  "gradClip", "microBatch", "env", "maxToolCalls", "topK", "toolTimeoutMs", "maxTurnTokens", "maxResponseTokens", "temperature", "policy", "bootstrapSteps", "bootstrapMixedShare",
  "rolloutResreq", "trainerResreq", "rolloutDtype", "threads", "backend", "rebaseEvery", "rebaseShare", "agent",
];

/** A digest of the options that define a run, and their values (to say what differs). */
export function runFingerprint(o: RunOptions): { digest: string; values: Record<string, unknown> } {
  const values = Object.fromEntries(SAME_RUN.map((k) => [k, o[k]]));
  return { digest: createHash("sha256").update(JSON.stringify(values)).digest("hex").slice(0, 32), values };
}

/** The cache key of a run's state. */
export function runStateKey(name: string): string {
  return `${runKeys(name)}run`;
}

/** A patch of the stored state: the history entries since the previous write, and the step counter. */
interface RunStatePatch {
  step: number;
  history: StepMetrics[];
  policyVersion?: number;
  updates?: number;
}

/** A fresh base after this many patches, so a reader folds at most this many. */
export const RUN_STATE_REBASE = 100;

/** The stored state of run `name` (its base with the patches after it folded in), or undefined when there is none. */
export async function readRunState(app: App, name: string): Promise<(RunState & { values?: Record<string, unknown> }) | undefined> {
  try {
    // Read once (a run reattaches from it): the client keeps no copy.
    return await app.objects.get<RunState & { values?: Record<string, unknown> }>(runStateKey(name), {
      fold: (acc, patches) => {
        const state = { ...acc, history: [...acc.history] };
        for (const p of patches as RunStatePatch[]) {
          state.history.push(...p.history);
          state.step = p.step;
          if (p.policyVersion !== undefined) state.policyVersion = p.policyVersion;
          if (p.updates !== undefined) state.updates = p.updates;
        }
        return state;
      },
    });
  } catch (err) {
    if (err instanceof ObjectNotFoundError) return undefined;
    throw err;
  } finally {
    app.objects.forget(runStateKey(name));
  }
}

/**
 * Keeps run `name`'s stored state current, at a cost per step that does not
 * grow with the run: the whole state is written (a new base) the first time,
 * when the run's identity (id, fingerprint, rollout setup) changes, and
 * after RUN_STATE_REBASE patches; otherwise each save appends a patch with
 * the history entries since the last one.
 */
export class RunStateWriter {
  private ref?: ObjectRef;
  /** History entries the stored state holds, and patches on its base. */
  private written = 0;
  private patches = 0;
  private identity = "";

  constructor(
    private readonly app: App,
    private readonly name: string,
  ) {}

  /** Stores `state`; returns the stored object's ref. */
  async save(state: RunState & { values: Record<string, unknown> }): Promise<ObjectRef> {
    const identity = JSON.stringify([state.runId, state.fingerprint, state.rolloutSetup]);
    if (!this.ref || identity !== this.identity || this.patches >= RUN_STATE_REBASE || state.history.length < this.written) {
      this.ref = await writeRunState(this.app, this.name, state, this.ref);
      this.identity = identity;
      this.patches = 0;
    } else {
      const patch: RunStatePatch = { step: state.step, history: state.history.slice(this.written), policyVersion: state.policyVersion, updates: state.updates };
      this.ref = await this.app.objects.patch(this.ref, patch);
      this.patches++;
    }
    this.written = state.history.length;
    return this.ref;
  }
}

/** Writes the state as a new base (replacing what was there); returns its ref. */
export async function writeRunState(app: App, name: string, state: RunState & { values: Record<string, unknown> }, held?: ObjectRef): Promise<ObjectRef> {
  if (held) return app.objects.update(held, state);
  try {
    return await app.objects.put(state, { key: runStateKey(name), pin: true });
  } catch {
    return app.objects.update(runStateKey(name), state);
  }
}
