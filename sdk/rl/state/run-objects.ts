/**
 * The objects a run makes in the head's cache, their keys and their
 * owners: every key a run uses is made here. Every object has an owner that deletes it when it no longer needs
 * it; per-step ones are also put as scratch objects, so that the head
 * deletes them with the app if their owner vanished first (a driver killed
 * mid-step). Under `runs/<name>/`:
 *
 * | object                   | key                          | owner          | deleted                                           |
 * |--------------------------|------------------------------|----------------|---------------------------------------------------|
 * | weights                  | `weights`                    | the run        | never (documented: checkpoint.json)               |
 * | run state                | `run`                        | the run        | never (documented: how a driver reattaches)       |
 * | rollout setup            | `rollout-setup`              | the run        | replaced by the next run of the name              |
 * | the environment's values | `env/<name>` (Search-R1: `env/corpus`) | the run | replaced by the next run of the name    |
 * | run state, loop status   | `run`, `loop`, `events`      | the run        | never (documented: how a driver reattaches)       |
 * | trainer snapshot         | `snapshot`                   | the run        | replaced by the next snapshot                     |
 * | a detached run's resume  | `resume-from`, `outputs`     | its loop       | once read / fetched                               |
 * | trainer setup            | `trainer-setup/…`            | the start      | once the trainers are set up                      |
 * | a step's trajectories    | `steps/<n>/traj-…`           | step n         | when step n leaves the window (`keepSteps`)       |
 * | a step's training slices | `steps/<n>/slice-<rank>`     | step n's update| once the trainers have trained on them            |
 * | an evaluation's answers  | `eval/<k>/traj-…`            | evaluation k   | once read                                         |
 * | a hand-rolled batch      | `batches/<n>/traj-…`         | `run.rollout`  | by `run.score`, or when the driver leaves         |
 * | an agent lease's batches | `steps/<n>/log-…` (and eval, batches) | step n | with its trajectories                          |
 * | a replay's output        | `replays/<k>/replay-…`       | replay k       | once read                                         |
 * | a kept weight chain      | `history/v<base>`            | the driver     | past `--replay-versions`, or when the driver leaves |
 *
 * The warm start's setup and batches (`bootstrap-run.ts`) are deleted at
 * once; shipped folders (cache/folder.ts) once the trainers loaded them.
 * A driver that creates or reattaches to a run deletes the steps and
 * evaluations of earlier drivers (their results lived in those drivers'
 * memory), and one that closes or disconnects deletes its own.
 */
import { randomUUID } from "node:crypto";
import type { ObjectRef } from "../../cache/object-cache.js";
import { VersionConflictError } from "../../errors/index.js";
import type { App } from "../../runtime/app.js";

/** The key prefix of everything run `name` owns. */
export function runKeys(name: string): string {
  return `runs/${name}/`;
}

/** The published weights of run `name`. */
export function weightsKey(name: string): string {
  return `${runKeys(name)}weights`;
}

/** The rollout setup (model shape, tokenizer, the environment's module and data) of run `name`. */
export function rolloutSetupKey(name: string): string {
  return `${runKeys(name)}rollout-setup`;
}

/** A large value of run `name`'s environment (TaskEnvironment.objects: Search-R1's passages, from which each rollout executor builds its index). */
export function envObjectKey(name: string, object: string): string {
  return `${runKeys(name)}env/${object}`;
}

/** The warm start of plan `hash` (shared by every run of the recipe and options it hashes). */
export function warmStartKey(hash: string): string {
  return `warmstart/${hash}/weights`;
}

/** A fresh key for the trainers' setup (fresh: trainers skip a setup object and version they already took). */
export function trainerSetupKey(name: string): string {
  return `${runKeys(name)}trainer-setup/${randomUUID()}`;
}

/** The prefix of step `step`'s objects; without a step, of every step's. */
export function stepKeys(name: string, step?: number): string {
  return `${runKeys(name)}steps/${step === undefined ? "" : `${step}/`}`;
}

/** The prefix of evaluation `n`'s objects; without one, of every evaluation's. */
export function evalKeys(name: string, n?: number): string {
  return `${runKeys(name)}eval/${n === undefined ? "" : `${n}/`}`;
}

/** A kept weight chain of run `name` whose base is publication version `base` (replays; see replay/history.ts); without one, the prefix of all of them. */
export function historyKey(name: string, base?: number): string {
  return `${runKeys(name)}history/${base === undefined ? "" : `v${base}`}`;
}

/** The prefix of replay `n`'s objects; without one, of every replay's. */
export function replayKeys(name: string, n?: number): string {
  return `${runKeys(name)}replays/${n === undefined ? "" : `${n}/`}`;
}

/** The prefix of hand-rolled batch `n`'s objects (`run.rollout`, deleted by `run.score`); without one, of every batch's. */
export function batchKeys(name: string, n?: number): string {
  return `${runKeys(name)}batches/${n === undefined ? "" : `${n}/`}`;
}

/** Puts `value` at `key`, or replaces what is there (its version goes on, so executors that hold it notice). */
export async function putOrUpdate(app: App, key: string, value: unknown): Promise<ObjectRef> {
  try {
    return await app.objects.put(value, { key });
  } catch (err) {
    if (!(err instanceof VersionConflictError)) throw err;
    return app.objects.update(key, value);
  }
}

/** Deletes the steps and evaluations of run `name` (an earlier driver's, or this one's when it leaves). */
export async function dropSessionObjects(app: App, name: string): Promise<void> {
  await app.objects.delete(stepKeys(name));
  await app.objects.delete(evalKeys(name));
  await app.objects.delete(batchKeys(name));
  await app.objects.delete(replayKeys(name));
  await app.objects.delete(historyKey(name));
}
