/**
 * A run's trainer gang: its declaration (the same each time, so a gang
 * that failed starts anew), its start (from a checkpoint, the task's model
 * folder, the recipe's warm start, or the seeded init), the first
 * publication, snapshots, and the restore of a lost gang from the last
 * snapshot. What the run records about its steps stays in run.ts.
 */
import os from "node:os";
import path from "node:path";
import { readdirSync } from "node:fs";
import { dropFolder, shipFolder, type FolderRef } from "../../cache/folder.js";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle } from "../../runtime/handles.js";
import type { PendingReport } from "../../runtime/pending-watch.js";
import type { GangFailedError } from "../../errors/index.js";
import { RunError } from "../errors.js";
import { TRAINER_CLASS } from "../services/modules.js";
import type { TrainerService, TrainerSetup } from "../services/trainer-service.js";
import type { readResume } from "../state/checkpoint.js";
import { trainerSetupKey } from "../state/run-objects.js";
import { readSnapshot, takeSnapshot, type TrainerSnapshot } from "../state/snapshot.js";
import { backendFor, threadsFor, type RunOptions } from "./options.js";
import type { PreparedTask, TaskRecipe } from "./recipe.js";

/** Debian's reference BLAS (what libblas.so.3 is until OpenBLAS is installed): measured here 4.7 against 52 GFLOP/s for OpenBLAS on the tiny model's products. */
const REFERENCE_BLAS = /\/blas\/libblas\.so/;

/** The files of a model folder the trainers load (weights and config; the tokenizer stays with the driver and rollouts). */
function weightFiles(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .filter((n) => n === "config.json" || n.endsWith(".safetensors") || n === "model.safetensors.index.json");
}

/** Declares a run's trainer gang (the same definition each time: declared again after it failed, it starts anew). */
export function declareTrainers(app: App, opts: RunOptions, replace: boolean, onPending: (p: PendingReport) => void): Promise<GangHandle<TrainerService>> {
  return app.service<TrainerService>(opts.serviceModules?.trainer ?? TRAINER_CLASS, { name: "trainer", resreq: opts.trainerResreq, warmup: opts.trainers, autoscale: false, replace, onPending }) as Promise<GangHandle<TrainerService>>;
}

/** Where a run's trainers are and what they start from. */
export interface TrainerContext {
  app: App;
  opts: RunOptions;
  task: PreparedTask;
  recipe: TaskRecipe;
  weightsKey: string;
}

/** Where a run's trainers are: its step, its policy version, the updates taken, and the run. */
export interface TrainersAt {
  step: number;
  policyVersion: number;
  updates: number;
  runId: string;
}

/** The trainer gang of one run. */
export class Trainers {
  constructor(
    private readonly c: TrainerContext,
    public gang: GangHandle<TrainerService>,
  ) {}

  /** Do all ranks hold run `runId` (set up for RL and not restarted since)? If so, rank 0's policy version and the updates taken. */
  async hold(runId: string): Promise<{ policyVersion: number; updates: number } | undefined> {
    const st = await this.gang.broadcast("status", Array.from({ length: this.c.opts.trainers }, () => [] as []));
    return st.every((s) => s.runId === runId && s.mode === "rl") ? { policyVersion: st[0]!.policyVersion, updates: st[0]!.updates } : undefined;
  }

  /** Ships a folder to the trainers: in place when they all run on this host (or when asked), else file by file. */
  private async ship(dir: string, names?: string[]): Promise<FolderRef> {
    const mode = this.c.opts.modelTransfer;
    const local = this.gang.members.every((m) => m.host === os.hostname());
    const objects = mode === "objects" || (mode === "auto" && !local);
    return shipFolder(this.c.app.objects, dir, { objects, names, forceObjects: mode === "objects" });
  }

  /**
   * Starts a new run's trainers: from the checkpoint being resumed, else the
   * task's model folder, else the recipe's warm start, else the seeded init.
   * Returns the policy version rank 0 published.
   */
  async start(runId: string, resume: ReturnType<typeof readResume> | undefined): Promise<number> {
    const { opts: o, task, recipe, app } = this.c;
    let checkpoint: FolderRef | undefined;
    let state: FolderRef | undefined;
    if (o.resume && resume) {
      const model = path.join(o.resume, "model");
      checkpoint = await this.ship(model, weightFiles(model));
      state = await this.ship(path.join(o.resume, "state"));
      o.log(`resuming from ${o.resume} at step ${resume.step}`);
    } else if (task.modelDir) {
      checkpoint = await this.ship(task.modelDir, weightFiles(task.modelDir));
    } else if (recipe.warmStart) {
      const dir = await recipe.warmStart({ app, trainer: this.gang, task, opts: o });
      if (dir) checkpoint = await this.ship(dir);
    }
    // The folders are read once by each rank: deleted once the ranks have loaded them (or failed to).
    const res = await this.setup(runId, checkpoint, state).finally(async () => {
      for (const f of [checkpoint, state]) if (f) await dropFolder(app.objects, f);
    });
    const r0 = res[0]!;
    const from = checkpoint ? ` from ${checkpoint.dir} (${r0.inPlace ? "read in place" : "shipped file by file"})` : "";
    o.log(`trainers ready (${r0.params.toLocaleString()} parameters on ${r0.device ?? "?"}${from}); weights published (${r0.publish?.bytes ?? 0} bytes)`);
    if (r0.device === "cpu" && r0.blas && REFERENCE_BLAS.test(r0.blas)) {
      o.log(`warning: the tensor engine's torch runs on the reference BLAS (${r0.blas}): its matrix products are ~10× slower than with OpenBLAS; install it with \`apt-get install libopenblas0-pthread\` and restart the executors (\`npm run hearth -- down\`)`);
    }
    o.onEvent?.({ type: "published", version: r0.publish?.version ?? 0, bytes: r0.publish?.bytes ?? 0, kind: r0.publish?.kind ?? "full", params: r0.params });
    return r0.publish?.version ?? 0;
  }

  /**
   * Sets every rank up for RL from `checkpoint` (else the task's seeded
   * init) and, when given, an exact `state`; with `publishVersion` rank 0's
   * first publication is a fresh base numbered so. The setup object is read
   * once by each rank and deleted once they have (or failed to).
   */
  private async setup(runId: string, checkpoint?: FolderRef, state?: FolderRef, publishVersion?: number, updates?: number) {
    const { opts: o, task, app } = this.c;
    const setup: TrainerSetup = {
      model: { ...task.model, seed: o.seed },
      checkpoint,
      state,
      trainer: { lr: o.lr, klCoef: o.klCoef, microBatchSize: o.microBatch, gradClip: o.gradClip, ...task.trainer },
      weights: this.c.weightsKey,
      threads: threadsFor(o, o.trainerResreq),
      backend: backendFor(o),
      rebase: { maxPatches: o.rebaseEvery, maxPatchShare: o.rebaseShare },
      runId,
      publishVersion,
      updates,
    };
    const ref = await app.objects.put(setup, { key: trainerSetupKey(o.name), scratch: true });
    try {
      return await this.gang.broadcast("setup", Array.from({ length: o.trainers }, () => [ref, "rl"] as [ObjectRef, "rl"]));
    } finally {
      await app.objects.delete(ref.key);
    }
  }

  /** Puts the trainers' exact state of now in the cache as the run's snapshot, replacing the last one. */
  snapshot(at: TrainersAt): Promise<TrainerSnapshot> {
    return takeSnapshot(this.c.app, this.gang, this.c.opts.name, at);
  }

  /**
   * The gang was lost (`lost`): declares it again and restores the new ranks
   * from the run's snapshot, which must hold the trainers' state as it was
   * last: no update since (the policy version it was taken at is the run's);
   * else the run cannot go on exactly and the error says what was lost.
   */
  async restore(lost: GangFailedError, at: TrainersAt): Promise<void> {
    const o = this.c.opts;
    const snap = await readSnapshot(this.c.app, o.name);
    const what = `the trainer gang lost rank ${lost.rank} (${lost.message})`;
    const fields = { run: o.name, step: at.step + 1, cause: lost };
    if (!snap || snap.runId !== at.runId) {
      throw new RunError(`${what}, and run '${o.name}' has no snapshot to restore it from: its weights and optimizer state after step ${at.step} are lost (--snapshot-every N keeps one; --resume from a checkpoint goes back to it)`, fields);
    }
    if (snap.policyVersion !== at.policyVersion || (snap.updates !== undefined && snap.updates !== at.updates)) {
      throw new RunError(
        `${what}; run '${o.name}'s last snapshot is of step ${snap.step} (policy version ${snap.policyVersion}, ${snap.updates ?? "?"} updates), and its trainers updated since (version ${at.policyVersion}, ${at.updates} updates at step ${at.step}): the updates after step ${snap.step} would be lost (--snapshot-every 1 keeps every step)`,
        fields,
      );
    }
    o.log(`${what}: declaring the gang again and restoring it from the snapshot of step ${snap.step} (policy version ${at.policyVersion})`);
    this.gang = await declareTrainers(this.c.app, o, false, (p) => o.log(`waiting: ${p.text}`));
    await this.setup(at.runId, snap.model, snap.state, snap.policyVersion, at.updates);
    o.onEvent?.({ type: "executors", rollouts: o.rollouts, trainers: o.trainers, reattached: false });
  }
}
