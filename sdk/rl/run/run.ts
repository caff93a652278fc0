/**
 * SearchR1Run: the driver of Search-R1 training. It layers the options
 * (generic, the task recipe's, the caller's), prepares the task, starts (or
 * reattaches to) the rollout pool and the trainer gang with the resources
 * the options ask for, starts the trainers from a model folder, a warm start
 * or a checkpoint, then runs steps through the pipeline (pipeline.ts) and
 * writes metrics.jsonl, checkpoint.json and standalone checkpoints
 * (checkpoint.ts). Notebook views attach in notebook/run-views.ts.
 */
import type { PendingReport } from "../../runtime/pending-watch.js";
import { randomUUID } from "node:crypto";
import { appendFileSync, existsSync, readdirSync, renameSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { dropFolder, shipFolder, type FolderRef } from "../../cache/folder.js";
import type { ObjectRef } from "../../cache/object-cache.js";
import { capacity, connect, type ClusterCapacity } from "../../connect.js";
import { checkSlurmJobs } from "../../engines/slurm/index.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle, PoolHandle } from "../../runtime/handles.js";
import { GangFailedError, HearthError } from "../../errors/index.js";
import { formatBytes } from "../../format.js";
import { parseResreq } from "../../runtime/resreq.js";
import { readResume, writeCheckpointJson, writeStandaloneCheckpoint } from "../state/checkpoint.js";
import { StepStore, trainLoop, type TrainOptions } from "./interactive.js";
import { backendFor, layerOptions, threadsFor, validateOptions, type SearchR1Options } from "./options.js";
import { RolloutsAhead } from "./overlap.js";
import { emByCategory, evaluate, runStep, setUtilisation, stepRollouts, type EvalResult, type RolloutParts, type StepMetrics, type StepResult, type StepServices } from "./pipeline.js";
import type { PreparedTask, TaskRecipe } from "./recipe.js";
import { recipeFor } from "../../envs/searchr1/recipes/index.js";
import { readRunState, runFingerprint, RunStateWriter, type RunState } from "../state/run-state.js";
import { corpusKey, dropSessionObjects, putOrUpdate, rolloutSetupKey, stepKeys, trainerSetupKey, weightsKey } from "../state/run-objects.js";
import { emReward, type RewardFn } from "../../envs/searchr1/reward.js";
import type { RolloutSetup, SearchR1Rollout } from "../services/rollout-service.js";
import { dropSnapshot, readSnapshot, takeSnapshot, type TrainerSnapshot } from "../state/snapshot.js";
import { withStepDisplay } from "../report/step-summary.js";
import type { SearchR1Trainer, TrainerSetup } from "../services/trainer-service.js";

export type { SearchR1Options } from "./options.js";
export type { EvalResult, StepMetrics, StepResult } from "./pipeline.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** The files of a model folder the trainers load (weights and config; the tokenizer stays with the driver and rollouts). */
function weightFiles(names: string[]): string[] {
  return names.filter((n) => n === "config.json" || n.endsWith(".safetensors") || n === "model.safetensors.index.json");
}

/** Debian's reference BLAS (what libblas.so.3 is until OpenBLAS is installed): measured here 4.7 against 52 GFLOP/s for OpenBLAS on the tiny model's products. */
const REFERENCE_BLAS = /\/blas\/libblas\.so/;

/** Declares the run's trainer gang (the same definition each time: declared again after it failed, it starts anew). */
function declareTrainers(app: App, opts: SearchR1Options, replace: boolean, onPending: (p: PendingReport) => void): Promise<GangHandle<SearchR1Trainer>> {
  return app.service<SearchR1Trainer>(
    opts.serviceModules?.trainer ?? { module: path.join(HERE, "trainer-service.js"), export: "SearchR1Trainer" },
    { name: "trainer", resreq: opts.trainerResreq, warmup: opts.trainers, autoscale: false, replace, onPending },
  ) as Promise<GangHandle<SearchR1Trainer>>;
}

/** Defaults of a run on the embedded default (the tiny preset's recipe). */
export const DEFAULTS: SearchR1Options = layerOptions(recipeFor("tiny", "synthetic").defaults, {});

/** A Search-R1 training run on warm executors. */
export class SearchR1Run {
  private reward: RewardFn = emReward;
  private stepNo = 0;
  private busy = false;
  readonly history: StepMetrics[] = [];
  /** The last `keepSteps` step results (trajectories included), for inspection and rescoring. */
  readonly results: StepStore;
  private readonly svc: StepServices;
  private runId: string = randomUUID();
  private readonly state: RunStateWriter;
  /** Evaluations run so far (each one's objects live under its number's keys until read). */
  private evals = 0;

  private constructor(
    readonly app: App,
    readonly opts: SearchR1Options,
    readonly task: PreparedTask,
    readonly recipe: TaskRecipe,
    private readonly rollout: PoolHandle<SearchR1Rollout>,
    private trainer: GangHandle<SearchR1Trainer>,
    rolloutSetup: ObjectRef,
  ) {
    this.results = new StepStore(opts.keepSteps);
    this.state = new RunStateWriter(app, opts.name);
    const svc: Omit<StepServices, "ahead"> = { app, opts, task, rollout, trainer, rolloutSetup, weightsKey: weightsKey(opts.name) };
    const ahead: RolloutsAhead<RolloutParts> = new RolloutsAhead((step) => stepRollouts(this.svc, step), opts.maxLag);
    this.svc = { ...svc, ahead };
  }

  /**
   * Layers and checks the options, prepares the task (every bad flag, model
   * folder or data file fails here, before any service starts), connects,
   * starts (or reattaches to) the services, starts the trainers and publishes
   * the first weights.
   */
  static async create(partial: Partial<SearchR1Options> = {}): Promise<SearchR1Run> {
    const recipe = recipeFor(partial.model ?? "tiny", partial.data ?? "synthetic");
    const opts = layerOptions(recipe.defaults, partial);
    validateOptions(opts);
    const resume = opts.resume ? readResume(opts.resume) : undefined;
    const log = opts.log;
    const task = await recipe.prepare(opts);
    if (task.train.length === 0) throw new HearthError(`${opts.data}: no training questions are left once ${task.heldOut.length} are held out for evaluation; lower --eval-size or use a larger file`);
    if (task.heldOut.length === 0) throw new HearthError(`${opts.data}: no held-out questions to evaluate on; raise --eval-size`);
    for (const note of task.notes) log(`note: ${note}`);
    log(`task: ${task.describe}`);
    opts.onEvent?.({ type: "task", describe: task.describe, train: task.train.length, heldOut: task.heldOut.length, passages: task.corpus.length });
    if (opts.engine === "slurm") {
      // Slurm is asked, with the very options the jobs will carry, before anything is submitted.
      await checkSlurmJobs(
        [
          { what: "a rollout executor's job", tasks: 1, resreq: opts.rolloutResreq },
          { what: `the trainer gang's job`, tasks: opts.trainers, resreq: opts.trainerResreq },
        ],
        { partition: opts.partition, account: opts.account, extraArgs: opts.sbatchArgs, env: opts.connectOptions?.slurm?.env, defaultMem: opts.connectOptions?.slurm?.defaultMem },
      );
    } else {
      // A fixed cluster: the resources must fit an agent, asked of the head before the app is opened.
      await checkCapacity(await capacity({ ...opts.connectOptions, name: opts.name, head: opts.head }), opts);
    }
    const app = await connect({
      ...opts.connectOptions,
      name: opts.name,
      head: opts.head,
      engine: opts.engine,
      partition: opts.partition,
      account: opts.account,
      extraArgs: opts.sbatchArgs.length > 0 ? opts.sbatchArgs : undefined,
      slurm: opts.bind !== undefined ? { ...opts.connectOptions?.slurm, bind: opts.bind } : opts.connectOptions?.slurm,
    });
    if (opts.bind !== undefined && hostOf(app.endpoint) !== hostOf(opts.bind)) {
      log(`note: --bind ${opts.bind} is not used: the Slurm head of this HEARTH_HOME already runs at ${app.endpoint} (stop it with stopSlurmHead, or use another HEARTH_HOME, to bind elsewhere)`);
    }
    const fp = runFingerprint(opts);
    const prior = opts.resume ? undefined : await readRunState(app, opts.name);
    let rolloutSetup: ObjectRef;
    if (prior && prior.fingerprint === fp.digest) {
      rolloutSetup = prior.rolloutSetup; // the rollouts hold it: nothing to rebuild
    } else {
      if (prior) log(`starting a new run '${opts.name}': its options differ from the run stored on this app (${differences(prior.values, fp.values)})`);
      // Under the run's keys: a new run of the name replaces the old one's (no copy per run is left behind).
      const corpus = await putOrUpdate(app, corpusKey(opts.name), task.corpus);
      const setup: RolloutSetup = {
        model: task.model,
        tokenizer: task.tokenizer.files,
        text: task.text,
        corpus,
        threads: threadsFor(opts, opts.rolloutResreq),
        dtype: opts.rolloutDtype,
      };
      rolloutSetup = await putOrUpdate(app, rolloutSetupKey(opts.name), setup);
    }
    const replace = opts.replace;
    // Asking for more than the cluster has is said at once and again while it waits (the head explains it).
    const onPending = (p: PendingReport): void => log(`waiting: ${p.text}`);
    const rollout = await app.service<SearchR1Rollout>(
      opts.serviceModules?.rollout ?? { module: path.join(HERE, "rollout-service.js"), export: "SearchR1Rollout" },
      { name: "rollout", resreq: opts.rolloutResreq, warmup: opts.rollouts, max: opts.rollouts, replace, onPending },
    );
    const trainer = await declareTrainers(app, opts, replace, onPending);
    log(`services ready: ${opts.rollouts} rollout executor(s) (${opts.rolloutResreq}), a gang of ${opts.trainers} trainer(s) (${opts.trainerResreq}, ${backendFor(opts)})`);
    const run = new SearchR1Run(app, opts, task, recipe, rollout, trainer, rolloutSetup);
    // Steps and evaluations of an earlier driver of this run: their results lived in its memory, so nothing can read them now.
    await dropSessionObjects(app, opts.name);
    const held = prior && prior.fingerprint === fp.digest ? await run.trainersHold(prior.runId) : undefined;
    if (prior && held) {
      if (prior.policyVersion !== undefined && held.policyVersion !== prior.policyVersion) {
        throw new HearthError(
          `run '${opts.name}' cannot go on exactly: its trainers hold policy version ${held.policyVersion}, but the run recorded version ${prior.policyVersion} at step ${prior.step}. ` +
            `A step was trained after the last one recorded (its driver was lost between the update and recording it), and that step's metrics and trajectories are lost. ` +
            `Start the run again (replace: true / other options), or resume it from a checkpoint (--resume DIR)`,
        );
      }
      run.reattach(prior);
      run.svc.ahead.policyVersion = held.policyVersion;
      log(`reattached to run '${opts.name}' at step ${prior.step}: trainers, rollouts and their state are as they were`);
      opts.onEvent?.({ type: "executors", rollouts: opts.rollouts, trainers: opts.trainers, reattached: true });
    } else {
      opts.onEvent?.({ type: "executors", rollouts: opts.rollouts, trainers: opts.trainers, reattached: false });
      // A new run's metrics.jsonl starts empty: an earlier run's in the same --out is kept beside it, not appended to.
      const metrics = path.join(opts.out, "metrics.jsonl");
      if (!resume && existsSync(metrics)) {
        const aside = path.join(opts.out, `metrics-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
        renameSync(metrics, aside);
        log(`note: ${opts.out} held an earlier run's metrics.jsonl: moved to ${path.basename(aside)}`);
      }
      await dropSnapshot(app, opts.name); // an earlier run's, if any
      await run.start(resume);
    }
    await run.saveState();
    if (opts.snapshotEvery > 0 && !(await readSnapshot(app, opts.name))) await run.snapshot();
    return run;
  }

  /**
   * Attaches to run `name`, which lives on the cluster (started with
   * `--detach`): a live handle with its history, a progress bar that
   * follows it, its trajectories, pause / resume / step / stop and
   * setReward (notebook/attached.ts). The run never depends on the handle.
   */
  static async attach(name: string, opts: { head?: string } = {}): Promise<import("../notebook/attached.js").AttachedRun> {
    const { AttachedRun } = await import("../notebook/attached.js");
    return AttachedRun.open(name, opts);
  }

  /** Do all trainer ranks hold run `runId` (set up for RL and not restarted since)? If so, rank 0's policy version. */
  private async trainersHold(runId: string): Promise<{ policyVersion: number } | undefined> {
    const st = await this.trainer.broadcast("status", Array.from({ length: this.opts.trainers }, () => [] as []));
    return st.every((s) => s.runId === runId && s.mode === "rl") ? { policyVersion: st[0]!.policyVersion } : undefined;
  }

  private reattach(state: RunState): void {
    this.runId = state.runId;
    this.stepNo = state.step;
    this.history.push(...state.history);
  }

  /** Stores the run's state in the cache (after start and after every step). */
  private async saveState(): Promise<void> {
    const fp = runFingerprint(this.opts);
    await this.state.save({ runId: this.runId, fingerprint: fp.digest, values: fp.values, step: this.stepNo, history: this.history, rolloutSetup: this.svc.rolloutSetup, policyVersion: this.svc.ahead.policyVersion });
  }

  /** Ships a folder to the trainers: in place when they all run on this host (or when asked), else file by file. */
  private async ship(dir: string, names?: string[]): Promise<FolderRef> {
    const mode = this.opts.modelTransfer;
    const local = this.trainer.members.every((m) => m.host === os.hostname());
    const objects = mode === "objects" || (mode === "auto" && !local);
    return shipFolder(this.app.objects, dir, { objects, names, forceObjects: mode === "objects" });
  }

  private async start(resume: ReturnType<typeof readResume> | undefined): Promise<void> {
    const o = this.opts;
    let checkpoint: FolderRef | undefined;
    let state: FolderRef | undefined;
    if (o.resume && resume) {
      checkpoint = await this.ship(path.join(o.resume, "model"), weightFiles(readdir(path.join(o.resume, "model"))));
      state = await this.ship(path.join(o.resume, "state"));
      this.stepNo = resume.step;
      this.history.push(...resume.history);
      o.log(`resuming from ${o.resume} at step ${resume.step}`);
    } else if (this.task.modelDir) {
      checkpoint = await this.ship(this.task.modelDir, weightFiles(readdir(this.task.modelDir)));
    } else if (this.recipe.warmStart) {
      const dir = await this.recipe.warmStart({ app: this.app, trainer: this.trainer, task: this.task, opts: o });
      if (dir) checkpoint = await this.ship(dir);
    }
    // The folders are read once by each rank: deleted once the ranks have loaded them (or failed to).
    const res = await this.setupTrainers(checkpoint, state).finally(async () => {
      for (const f of [checkpoint, state]) if (f) await dropFolder(this.app.objects, f);
    });
    const r0 = res[0]!;
    this.svc.ahead.policyVersion = r0.publish?.version ?? 0;
    const from = checkpoint ? ` from ${checkpoint.dir} (${r0.inPlace ? "read in place" : "shipped file by file"})` : "";
    o.log(`trainers ready (${r0.params.toLocaleString()} parameters on ${r0.device ?? "?"}${from}); weights published (${r0.publish?.bytes ?? 0} bytes)`);
    if (r0.device === "cpu" && r0.blas && REFERENCE_BLAS.test(r0.blas)) {
      o.log(`warning: the tensor engine's torch runs on the reference BLAS (${r0.blas}): its matrix products are ~10× slower than with OpenBLAS; install it with \`apt-get install libopenblas0-pthread\` and restart the executors (\`npm run hearth -- down\`)`);
    }
    o.onEvent?.({ type: "published", version: r0.publish?.version ?? 0, bytes: r0.publish?.bytes ?? 0, kind: r0.publish?.kind ?? "full", params: r0.params });
  }

  /**
   * Sets every trainer rank up for RL from `checkpoint` (else the task's
   * seeded init) and, when given, an exact `state`; with `publishVersion`
   * rank 0's first publication is a fresh base numbered so. The setup object
   * is read once by each rank and deleted once they have (or failed to).
   */
  private async setupTrainers(checkpoint?: FolderRef, state?: FolderRef, publishVersion?: number) {
    const o = this.opts;
    const setup: TrainerSetup = {
      model: { ...this.task.model, seed: o.seed },
      checkpoint,
      state,
      trainer: { lr: o.lr, klCoef: o.klCoef, microBatchSize: o.microBatch, gradClip: o.gradClip, ...this.task.trainer },
      weights: this.svc.weightsKey,
      threads: threadsFor(o, o.trainerResreq),
      backend: backendFor(o),
      rebase: { maxPatches: o.rebaseEvery, maxPatchShare: o.rebaseShare },
      runId: this.runId,
      publishVersion,
    };
    const ref = await this.app.objects.put(setup, { key: trainerSetupKey(o.name), scratch: true });
    try {
      return await this.trainer.broadcast("setup", Array.from({ length: o.trainers }, () => [ref, "rl"] as [ObjectRef, "rl"]));
    } finally {
      await this.app.objects.delete(ref.key);
    }
  }

  /** Puts the trainers' exact state of now in the cache as the run's snapshot (`snapshotEvery`), replacing the last one. */
  async snapshot(): Promise<TrainerSnapshot> {
    return takeSnapshot(this.app, this.trainer, this.opts.name, { step: this.stepNo, policyVersion: this.svc.ahead.policyVersion, runId: this.runId });
  }

  /**
   * The trainer gang was lost (`lost`): declares it again and restores the
   * new ranks from the run's snapshot, which must hold the trainers' state
   * as it was last: no update since (the policy version it was taken at is
   * the run's); else the run cannot go on exactly and the error says what
   * was lost.
   */
  private async restoreTrainers(lost: GangFailedError): Promise<void> {
    const o = this.opts;
    const snap = await readSnapshot(this.app, o.name);
    const what = `the trainer gang lost rank ${lost.rank} (${lost.message})`;
    if (!snap || snap.runId !== this.runId) throw new HearthError(`${what}, and run '${o.name}' has no snapshot to restore it from: its weights and optimizer state after step ${this.stepNo} are lost (--snapshot-every N keeps one; --resume from a checkpoint goes back to it)`, { cause: lost });
    const version = this.svc.ahead.policyVersion;
    if (snap.policyVersion !== version) {
      throw new HearthError(
        `${what}; run '${o.name}'s last snapshot is of step ${snap.step} (policy version ${snap.policyVersion}), and its trainers updated since (version ${version} at step ${this.stepNo}): the updates after step ${snap.step} would be lost (--snapshot-every 1 keeps every step)`,
        { cause: lost },
      );
    }
    o.log(`${what}: declaring the gang again and restoring it from the snapshot of step ${snap.step} (policy version ${version})`);
    this.trainer = this.svc.trainer = await declareTrainers(this.app, o, false, (p) => o.log(`waiting: ${p.text}`));
    await this.setupTrainers(snap.model, snap.state, snap.policyVersion);
    o.onEvent?.({ type: "executors", rollouts: o.rollouts, trainers: o.trainers, reattached: false });
  }

  /** The rollout pool (e.g. to address each member). */
  get rolloutPool(): PoolHandle<SearchR1Rollout> {
    return this.rollout;
  }

  /** The trainer gang. */
  get trainerGang(): GangHandle<SearchR1Trainer> {
    return this.trainer;
  }

  /** The rollout setup object every rollout call names. */
  get rolloutSetup(): ObjectRef {
    return this.svc.rolloutSetup;
  }

  /** Steps completed so far. */
  get stepsDone(): number {
    return this.stepNo;
  }

  /** Replaces the reward function; the next step uses it, executors are untouched. */
  setReward(fn: RewardFn): void {
    if (typeof fn !== "function") throw new HearthError("setReward needs a function (response, golds) => number");
    this.reward = fn;
  }

  /** The reward function in use. */
  get rewardFn(): RewardFn {
    return this.reward;
  }

  /** Runs one training step (and, every `evalEvery` steps, an evaluation). */
  async step(): Promise<StepResult> {
    if (this.busy) throw new HearthError("a step is already running on this run; await it before starting another");
    this.busy = true;
    try {
      const t0 = performance.now();
      const step = this.stepNo + 1;
      let ran: StepResult;
      try {
        ran = await runStep(this.svc, step, this.reward);
      } catch (err) {
        if (!(err instanceof GangFailedError) || this.opts.snapshotEvery === 0) throw err;
        // Nothing of the step was recorded: restored to the last step's state, the trainers take it again.
        await this.restoreTrainers(err);
        ran = await runStep(this.svc, step, this.reward);
      }
      const result = withStepDisplay(ran);
      this.stepNo = step;
      const m = result.metrics;
      const emit = this.opts.onEvent;
      emit?.({ type: "sync", step, bytes: m.sync_bytes, executors: m.sync_executors, version: m.weights_version });
      // Behind by a version or more, the gap is the policy's own change: the check means "stale or different numerics" only in sync.
      const inSync = this.opts.maxLag === 0 || m.policy_lag_max === 0;
      if (inSync && m.logprob_gap !== undefined && m.logprob_gap > this.opts.logprobGapWarn) {
        const text = `the sampler's logprobs differ from the trainer's by ${m.logprob_gap.toFixed(4)} per token on average (max ${(m.logprob_gap_max ?? NaN).toFixed(4)}; warn above ${this.opts.logprobGapWarn}): a rollout may hold stale weights, or its numerics differ from the trainer's`;
        this.opts.log(`warning: step ${step}: ${text}`);
        emit?.({ type: "warning", step, text });
      }
      if (this.opts.evalEvery > 0 && step % this.opts.evalEvery === 0) {
        const ev = await this.evaluate();
        m.eval_em = ev.em;
        m.eval_searches = ev.searchesPerSample;
        const by = emByCategory(ev);
        if (by) m.eval_em_by = by;
      }
      m.step_s = (performance.now() - t0) / 1000;
      setUtilisation(m, this.opts);
      this.history.push(m);
      appendFileSync(path.join(this.opts.out, "metrics.jsonl"), `${JSON.stringify(m)}\n`);
      writeCheckpointJson(this.opts.out, { step, app: this.app.name, weightsKey: this.svc.weightsKey, rolloutSetup: this.svc.rolloutSetup, lastTrajectories: result.trajectories });
      await this.saveState();
      if (this.opts.snapshotEvery > 0 && step % this.opts.snapshotEvery === 0) {
        try {
          await this.snapshot();
        } catch (err) {
          // The step is complete and recorded; the loss is the next step's to handle (restored when nothing was trained since the last snapshot).
          if (!(err instanceof GangFailedError)) throw err;
          this.opts.log(`warning: step ${step} is recorded, but the trainer gang was lost before its snapshot: ${err.message}`);
        }
      }
      // A step that leaves the inspection window takes its objects with it.
      for (const old of this.results.add(result)) await this.app.objects.delete(stepKeys(this.opts.name, old.metrics.step));
      emit?.({ type: "step", step, metrics: m });
      return result;
    } finally {
      this.busy = false;
    }
  }

  /** Runs `n` steps with a progress bar; stops between steps when `signal` aborts or the kernel interrupts, leaving the run consistent. */
  async train(n: number, opts: TrainOptions = {}): Promise<StepMetrics[]> {
    // With a max lag, no rollouts are started for steps past the last one asked for.
    this.svc.ahead.horizon = this.stepNo + n;
    try {
      return await trainLoop(n, () => this.step(), opts);
    } finally {
      this.svc.ahead.horizon = Number.POSITIVE_INFINITY;
    }
  }

  /** Starts no rollouts ahead for steps past `last` (what `train(n)` does for its n steps; a loop stepping one by one sets it). */
  trainUpTo(last: number): void {
    this.svc.ahead.horizon = last;
  }

  /** The policy lag allowed (K); settable between steps. */
  get maxLag(): number {
    return this.svc.ahead.maxLag;
  }

  set maxLag(k: number) {
    this.svc.ahead.maxLag = k;
    this.opts.maxLag = k;
  }

  /** A held step's result (default the latest; the last `keepSteps` are held). */
  result(step?: number): StepResult {
    return this.results.get(step);
  }

  /** Greedy answers on the held-out questions; exact match. */
  async evaluate(): Promise<EvalResult> {
    const ev = await evaluate(this.svc, ++this.evals);
    this.opts.onEvent?.({ type: "eval", step: this.stepNo, em: ev.em, searchesPerSample: ev.searchesPerSample });
    return ev;
  }

  /**
   * Policy digests of every trainer rank and every rollout executor (each
   * addressed by id): all equal when every rollout holds the trainers' latest
   * weights. A rollout that never took a call has digest null.
   */
  async digests(): Promise<{ trainers: Array<{ rank: number; digest: string }>; rollouts: Array<{ executorId: string; digest: string | null; version: number }> }> {
    const trainers = await this.trainer.broadcast("digest", Array.from({ length: this.opts.trainers }, () => [] as []));
    const rollouts = (await this.rollout.broadcastMembers("digest")).map((m) => m.result);
    return { trainers, rollouts };
  }

  /**
   * Brings every rollout executor (each addressed by id) to the trainers'
   * latest publication without generating; then `digests()` compares all of
   * them. Returns each one's version and the bytes it fetched.
   */
  async syncRollouts(): Promise<Array<{ executorId: string; version: number; bytes: number }>> {
    return (await this.rollout.broadcastMembers("sync", this.svc.rolloutSetup, this.svc.weightsKey)).map((m) => m.result);
  }

  /** Writes a standalone checkpoint (complete HF folder, exact trainer state, driver state) under `<out>/checkpoint`. */
  async saveCheckpoint(dir = path.join(this.opts.out, "checkpoint")): Promise<string> {
    return writeStandaloneCheckpoint(this.app, this.trainer, dir, this.task.tokenizer, {
      step: this.stepNo,
      history: this.history,
      options: { ...this.opts, log: undefined, connectOptions: undefined },
    });
  }

  /**
   * Leaves the executors warm (for the app's keep-alive) and disconnects,
   * after the rollouts started ahead of their steps settle; the held steps'
   * objects are deleted (what the run documents stays: weights, run state).
   */
  async disconnect(): Promise<void> {
    await this.leave();
    await this.app.disconnect();
  }

  /** Stops the services and disconnects, after the rollouts started ahead of their steps settle and the held steps' objects are deleted. */
  async close(): Promise<void> {
    await this.leave();
    await this.app.close();
  }

  /**
   * Stops the run's rollout and trainer services (their executors are
   * released) and disconnects, leaving the app itself, its other services
   * and the run's documented objects (weights, run state) for its keep-alive.
   * A run's loop on the cluster ends this way, so that its outputs stay
   * fetchable after its services are gone.
   */
  async release(): Promise<void> {
    await this.leave();
    try {
      await this.app.stopService("rollout");
      await this.app.stopService("trainer");
    } finally {
      await this.app.disconnect();
    }
  }

  /** Settles the rollouts started ahead and deletes this driver's steps and evaluations (the held results go with them). */
  private async leave(): Promise<void> {
    await this.svc.ahead.discard();
    this.results.clear();
    // Scratch objects: should the head be unreachable now, it deletes them when it releases the app.
    await dropSessionObjects(this.app, this.opts.name).catch(() => undefined);
  }
}

/**
 * On a fixed cluster (no Slurm jobs to add), a resreq that no agent can ever
 * satisfy would leave the services pending: say so before the app is even
 * opened (the head's capacity is asked without creating it).
 */
async function checkCapacity(cluster: ClusterCapacity, o: SearchR1Options): Promise<void> {
  // A head whose agents have not registered yet may still get them.
  if (cluster.agents.length === 0) return;
  for (const [flag, resreq] of [["--rollout-resreq", o.rolloutResreq], ["--trainer-resreq", o.trainerResreq]] as const) {
    const want = parseResreq(resreq);
    const fits = cluster.agents.some((a) => a.total.cpu >= want.cpu && a.total.mem >= want.mem && a.total.gpus >= want.gpu);
    if (!fits) {
      const have = cluster.agents.map((a) => `${a.id}: cpu=${a.total.cpu},mem=${formatBytes(a.total.mem)},gpu=${a.total.gpus}`).join("; ");
      throw new HearthError(
        `${flag} "${resreq}" fits no agent of this cluster (${have}): ask for less (on CPU, e.g. --rollout-resreq cpu=1 --trainer-resreq cpu=1), or add an agent that has it`,
      );
    }
  }
}

function differences(a: Record<string, unknown> | undefined, b: Record<string, unknown>): string {
  const keys = Object.keys(b).filter((k) => JSON.stringify(a?.[k]) !== JSON.stringify(b[k]));
  return keys.map((k) => `${k}: ${JSON.stringify(a?.[k])} → ${JSON.stringify(b[k])}`).join(", ") || "unknown";
}

/** The host part of tcp://HOST:PORT. */
function hostOf(endpoint: string): string {
  return /^tcp:\/\/(.+):\d+$/.exec(endpoint)?.[1] ?? endpoint;
}

function readdir(dir: string): string[] {
  return readdirSync(dir).sort();
}
