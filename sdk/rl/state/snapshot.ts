/**
 * A run's trainer snapshot (`--snapshot-every N`): rank 0's model and exact
 * trainer state (fp32 weights, AdamW moments, steps; every rank holds the
 * same, data parallel) as cache objects under `runs/<name>/snapshot`,
 * replaced every N steps. When the trainer gang is lost mid-run (a rank's
 * executor, node or Slurm job), the run declares the gang again, sets the
 * new ranks up from the snapshot (rank 0 then publishes the same weights
 * under the version the rollouts hold) and runs the step again: exact when
 * the snapshot is of the last completed step.
 */
import { dropFolder, type FolderRef } from "../../cache/folder.js";
import { HearthError, ObjectNotFoundError } from "../../errors/index.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle } from "../../runtime/handles.js";
import { putOrUpdate, runKeys } from "./run-objects.js";
import type { TrainerService } from "../services/trainer-service.js";

/** What the snapshot object holds. */
export interface TrainerSnapshot {
  /** The run's step when it was taken, its policy version then, and the run it belongs to. */
  step: number;
  policyVersion: number;
  /** The RL updates the trainers had taken then (absent in snapshots from before the count). */
  updates?: number;
  runId: string;
  model: FolderRef;
  state: FolderRef;
  /** When it was taken (epoch ms), and its bytes. */
  at: number;
  bytes: number;
}

/** The key of run `name`'s snapshot. */
export function snapshotKey(name: string): string {
  return `${runKeys(name)}snapshot`;
}

/** Run `name`'s snapshot, or undefined when it has none. */
export async function readSnapshot(app: App, name: string): Promise<TrainerSnapshot | undefined> {
  try {
    return await app.objects.get<TrainerSnapshot>(snapshotKey(name));
  } catch (err) {
    if (err instanceof ObjectNotFoundError) return undefined;
    throw err;
  } finally {
    app.objects.forget(snapshotKey(name));
  }
}

/** Deletes run `name`'s snapshot and its folders' objects (a new run of the name). */
export async function dropSnapshot(app: App, name: string): Promise<void> {
  const snap = await readSnapshot(app, name);
  if (!snap) return;
  await app.objects.delete(snapshotKey(name));
  await dropSnapshotFolders(app, snap);
}

async function dropSnapshotFolders(app: App, snap: TrainerSnapshot): Promise<void> {
  await dropFolder(app.objects, snap.model);
  await dropFolder(app.objects, snap.state);
}

/** Rank 0 saves its model and exact state into the cache; the record replaces the last snapshot, whose objects are deleted then. */
export async function takeSnapshot(app: App, trainer: GangHandle<TrainerService>, name: string, at: Pick<TrainerSnapshot, "step" | "policyVersion" | "updates" | "runId">): Promise<TrainerSnapshot> {
  // No host: never written in place, always shipped back as objects (the snapshot must outlive rank 0's node).
  const target = { host: "", dir: "", state: true };
  const saved = await trainer.broadcast("save", Array.from({ length: trainer.size }, () => [target] as [typeof target]));
  const r0 = saved.find((s) => s.rank === 0);
  if (!r0?.model || !r0.state) throw new HearthError("the trainer gang's rank 0 shipped no model and state for the snapshot");
  await trainer.callRank(0, "dropScratch");
  const prior = await readSnapshot(app, name);
  const bytes = [...r0.model.files, ...r0.state.files].reduce((n, f) => n + f.size, 0);
  const snap: TrainerSnapshot = { ...at, model: r0.model, state: r0.state, at: Date.now(), bytes };
  await putOrUpdate(app, snapshotKey(name), snap);
  if (prior) await dropSnapshotFolders(app, prior);
  return snap;
}
