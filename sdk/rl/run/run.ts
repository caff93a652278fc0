/**
 * AgentRun: a training run of a tool-using agent on warm executors, for any
 * environment (the package it is created with gives the recipes). It opens
 * the run (open.ts: options, task, services), starts or reattaches to its
 * trainers (trainers.ts), runs steps through the pipeline (pipeline.ts) and
 * records them: metrics.jsonl, checkpoint.json, the run's state in the cache
 * and standalone checkpoints (checkpoint.ts). A step's parts are public
 * calls too (`rollout`, `score`, `trainOn`, `publish`), for a loop of one's
 * own from a notebook cell; the built-in step is the same calls. Notebook
 * views attach in notebook/run-views.ts. (Past 400 lines: this is the one
 * class users read, its whole public surface; the work is in open.ts,
 * trainers.ts and pipeline.ts, and what is here is the calls and recording.)
 */
import { randomUUID } from "node:crypto";
import { appendFileSync, existsSync, renameSync } from "node:fs";
import path from "node:path";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle, PoolHandle } from "../../runtime/handles.js";
import { GangFailedError } from "../../errors/index.js";
import { OptionError, RunError } from "../errors.js";
import { withStepDisplay } from "../report/step-summary.js";
import type { RolloutService } from "../services/rollout-service.js";
import type { TrainerService } from "../services/trainer-service.js";
import { writeCheckpointJson, writeStandaloneCheckpoint } from "../state/checkpoint.js";
import { batchKeys, dropSessionObjects, replayKeys, stepKeys, weightsKey } from "../state/run-objects.js";
import { runFingerprint, RunStateWriter, type RunState } from "../state/run-state.js";
import { dropSnapshot, readSnapshot, type TrainerSnapshot } from "../state/snapshot.js";
import type { EvalResult, PublishStats, RewardFn, ScoredSample, StepMetrics, StepResult, TaskItem, TrainResult } from "../types.js";
import { StepStore, trainLoop, type TrainOptions } from "./interactive.js";
import { checkReattach, openRun, putRolloutSetup, type OpenedRun } from "./open.js";
import type { RunOptions } from "./options.js";
import { RolloutsAhead } from "./overlap.js";
import { collect, emByCategory, evaluate, publish, rollouts, runStep, setUtilisation, stepItems, stepRollouts, trainOn, type Collected, type RolloutParts, type StepServices } from "./pipeline.js";
import type { EnvironmentPackage, PreparedTask, TaskRecipe } from "./recipe.js";
import type { AgentFn } from "../agent/agents.js";
import { runEndpointKey, RunEndpoint, type EpisodeSessions } from "./agent-rollouts.js";
import { newAlarms } from "./alarms.js";
import { WeightHistory } from "../replay/history.js";
import type { ReplayOptions } from "../replay/replay.js";
import type { BranchAsk, EpisodeReplay } from "../replay/replayed.js";
import type { ReplayJSON } from "../replay/episode.js";
// The replay surface loads its views (tables) only when used: the CLI's training path stays free of them.
import type { ReplayContext, VersionComparison } from "../replay/run-replay.js";
import type { Trainers, TrainersAt } from "./trainers.js";

export type { RunOptions } from "./options.js";
export type { EvalResult, StepMetrics, StepResult } from "../types.js";

/** A batch rolled out by `run.rollout` (its trajectories live in the cache until `score` reads them). */
export interface Rollouts {
  readonly parts: RolloutParts;
  /** The key prefix of its trajectories (deleted by `score`). */
  readonly keys: string;
}

/** Options of `run.rollout`. */
export interface RolloutOptions {
  /**
   * An agent to run the episodes instead of the task's environment: a
   * function (run here, in this process, against the executors' endpoint) or
   * `FILE#EXPORT` (run warm in the rollout executors). Default: the run's
   * `--agent`, if any.
   */
  agent?: AgentFn | string;
  /** Samples per item (default the run's groupSize). */
  groupSize?: number;
  /** Default the run's temperature; 0 is greedy. */
  temperature?: number;
  /** The step whose seeds the samples use (default the next step's): the same step gives the same tokens, as the built-in step's. */
  step?: number;
}

/** A tool-use RL run on warm executors. */
export class AgentRun {
  private reward: RewardFn;
  private stepNo = 0;
  private busy = false;
  readonly history: StepMetrics[] = [];
  /** The last `keepSteps` step results (trajectories included), for inspection and rescoring. */
  readonly results: StepStore;
  private readonly svc: StepServices;
  private runId: string = randomUUID();
  private readonly state: RunStateWriter;
  /** Evaluations and hand-rolled batches run so far (each one's objects live under its number's keys until read). */
  private evals = 0;
  private batches = 0;
  private replays = 0;
  private envRevision = 0;
  private endpoint_?: RunEndpoint;
  /** Alarms already raised in this run (each warns once). */
  private readonly alarmsRaised = new Set<string>();
  /** Where the trainers were when the run last recorded its state. */
  private recorded!: TrainersAt;
  readonly app: App;
  readonly opts: RunOptions;
  readonly task: PreparedTask;
  readonly recipe: TaskRecipe;
  private readonly rollout_: PoolHandle<RolloutService>;
  private readonly trainers: Trainers;

  private constructor(o: OpenedRun) {
    ({ app: this.app, opts: this.opts, task: this.task, recipe: this.recipe, rollout: this.rollout_, trainers: this.trainers } = o);
    this.reward = o.task.environment.reward;
    this.results = new StepStore(this.opts.keepSteps);
    this.state = new RunStateWriter(this.app, this.opts.name);
    const svc: Omit<StepServices, "ahead" | "updates"> = { app: this.app, opts: this.opts, task: this.task, rollout: this.rollout_, trainer: o.trainers.gang, rolloutSetup: o.rolloutSetup, weightsKey: weightsKey(this.opts.name) };
    const ahead: RolloutsAhead<RolloutParts> = new RolloutsAhead((step) => stepRollouts(this.svc, step), this.opts.maxLag);
    const history = new WeightHistory(this.app, this.opts.name, svc.weightsKey, this.opts.replayVersions);
    this.svc = { ...svc, ahead, updates: 0, history };
  }

  /**
   * Opens a run of the environment package `pkg`: options layered and
   * checked, the task prepared, services started (or reattached to), the
   * trainers started and the first weights published.
   */
  static async create(partial: Partial<RunOptions>, pkg: EnvironmentPackage): Promise<AgentRun> {
    const opened = await openRun(partial, pkg);
    const run = new AgentRun(opened);
    try {
      await run.begin(opened);
    } catch (err) {
      // The run never started: its app's connection goes (the executors stay warm for the keep-alive), so the caller's process can exit.
      await opened.app.disconnect().catch(() => undefined);
      throw err;
    }
    return run;
  }

  /** Reattaches to the stored run when its trainers still hold it, else starts it anew. */
  private async begin(o: OpenedRun): Promise<void> {
    const { opts, app } = this;
    // Steps and evaluations of an earlier driver of this run: their results lived in its memory, so nothing can read them now.
    await dropSessionObjects(app, opts.name);
    const held = o.same ? await this.trainers.hold(o.same.runId) : undefined;
    if (o.same && held) {
      checkReattach(opts, o.same, held);
      this.reattach(o.same);
      this.svc.ahead.policyVersion = held.policyVersion;
      this.svc.updates = held.updates;
      opts.log(`reattached to run '${opts.name}' at step ${o.same.step}: trainers, rollouts and their state are as they were`);
      opts.onEvent?.({ type: "executors", rollouts: opts.rollouts, trainers: opts.trainers, reattached: true });
    } else {
      opts.onEvent?.({ type: "executors", rollouts: opts.rollouts, trainers: opts.trainers, reattached: false });
      // A new run's metrics.jsonl starts empty: an earlier run's in the same --out is kept beside it, not appended to.
      const metrics = path.join(opts.out, "metrics.jsonl");
      if (!o.resume && existsSync(metrics)) {
        const aside = path.join(opts.out, `metrics-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`);
        renameSync(metrics, aside);
        opts.log(`note: ${opts.out} held an earlier run's metrics.jsonl: moved to ${path.basename(aside)}`);
      }
      await dropSnapshot(app, opts.name); // an earlier run's, if any
      if (o.resume) {
        this.stepNo = o.resume.step;
        this.history.push(...o.resume.history);
      }
      this.svc.ahead.policyVersion = await this.trainers.start(this.runId, o.resume);
    }
    // The first publication (or the live object of a reattached run) starts the kept chains.
    await this.svc.history?.record(this.svc.ahead.policyVersion);
    await this.saveState();
    if (opts.snapshotEvery > 0 && !(await readSnapshot(app, opts.name))) await this.snapshot();
  }

  private reattach(state: RunState): void {
    this.runId = state.runId;
    this.stepNo = state.step;
    this.history.push(...state.history);
  }

  /** Stores the run's state in the cache (after start and after every step); what it records is where a restore goes back to. */
  private async saveState(): Promise<void> {
    this.recorded = this.at();
    const fp = runFingerprint(this.opts);
    await this.state.save({ runId: this.runId, fingerprint: fp.digest, values: fp.values, step: this.stepNo, history: this.history, rolloutSetup: this.svc.rolloutSetup, policyVersion: this.svc.ahead.policyVersion, updates: this.svc.updates });
  }

  /** Puts the trainers' exact state of now in the cache as the run's snapshot (`snapshotEvery`), replacing the last one. */
  async snapshot(): Promise<TrainerSnapshot> {
    return this.trainers.snapshot(this.at());
  }

  /** Where the trainers are (what a snapshot records and a restore checks). */
  private at(): TrainersAt {
    return { step: this.stepNo, policyVersion: this.svc.ahead.policyVersion, updates: this.svc.updates, runId: this.runId };
  }

  /** The rollout pool (e.g. to address each member). */
  get rolloutPool(): PoolHandle<RolloutService> {
    return this.rollout_;
  }

  /** The trainer gang. */
  get trainerGang(): GangHandle<TrainerService> {
    return this.trainers.gang;
  }

  /** The rollout setup object every rollout call names. */
  get rolloutSetup(): ObjectRef {
    return this.svc.rolloutSetup;
  }

  /** Steps completed so far. */
  get stepsDone(): number {
    return this.stepNo;
  }

  /** The trainers' policy version: what the last publication was numbered. */
  get policyVersion(): number {
    return this.svc.ahead.policyVersion;
  }

  /** Replaces the reward function; the next step uses it, executors are untouched. */
  setReward(fn: RewardFn): void {
    if (typeof fn !== "function") throw new OptionError("setReward needs a function (response, golds) => number", { flag: "reward" });
    this.reward = fn;
  }

  /** The reward function in use. */
  get rewardFn(): RewardFn {
    return this.reward;
  }

  // ── a step's parts, for a loop of one's own ──────────────────────────

  /** The training items the built-in step `step` rolls out (a seeded draw of promptsPerStep items; default the next step's). */
  itemsOf(step = this.stepNo + 1): TaskItem[] {
    return stepItems(this.opts, this.task, step);
  }

  /**
   * Rolls `items` out with the current policy on the warm pool (groupSize
   * samples each, seeded by `step` as the built-in step's are). The
   * trajectories stay in the cache until `score` reads them.
   */
  async rollout(items: readonly TaskItem[], o: RolloutOptions = {}): Promise<Rollouts> {
    const keys = batchKeys(this.opts.name, ++this.batches);
    const groupSize = o.groupSize ?? this.opts.groupSize;
    const temperature = o.temperature ?? this.opts.temperature;
    const step = o.step ?? this.stepNo + 1;
    if (typeof o.agent === "function") {
      const sessions = await this.endpoint.open(items, { groupSize, temperature, step, keys });
      await sessions.run(o.agent);
      return { parts: await sessions.collect(), keys };
    }
    const svc = typeof o.agent === "string" ? { ...this.svc, opts: { ...this.opts, agent: o.agent } } : this.svc;
    const parts = await rollouts(svc, items, groupSize, temperature, step, keys);
    return { parts, keys };
  }

  /**
   * Opens episode sessions for agents that run elsewhere (any process, any
   * language): G per item, with each session's `baseURL` and `apiKey`; end
   * them with `finish` (or the agent's `POST /hearth/v1/session/finish`),
   * then `collect()` and `score` the batch like any other.
   */
  async openSessions(items: readonly TaskItem[], o: Omit<RolloutOptions, "agent"> & { leaseMs?: number } = {}): Promise<EpisodeSessions & { batch(): Promise<Rollouts> }> {
    const keys = batchKeys(this.opts.name, ++this.batches);
    const sessions = await this.endpoint.open(items, { groupSize: o.groupSize, temperature: o.temperature, step: o.step ?? this.stepNo + 1, keys, leaseMs: o.leaseMs });
    return Object.assign(sessions, { batch: async (): Promise<Rollouts> => ({ parts: await sessions.collect(), keys }) });
  }

  /** The run's agent endpoint: its model name, key and each rollout executor's address (docs/agents.md). */
  get endpoint(): RunEndpoint {
    if (!this.task.tokenizer.template) throw new RunError(`run '${this.opts.name}' serves no agent endpoint: its policy's tokenizer has no chat template (use a task whose policy has one, e.g. agent-calculator, or a model folder with a chat_template)`, { run: this.opts.name });
    this.endpoint_ ??= new RunEndpoint(() => this.svc, runEndpointKey(this.app, this.opts.name));
    return this.endpoint_;
  }

  /**
   * Makes `agent` (a function) run every episode from the next step on: the
   * built-in step, evaluations and `rollout` open G sessions per item on the
   * executors' endpoint and run it here, in this process (a notebook cell's
   * agent). `undefined` goes back to the run's `--agent` or environment.
   */
  setAgent(agent: AgentFn | undefined): void {
    if (agent !== undefined && typeof agent !== "function") throw new OptionError("setAgent needs an async function (item, { baseURL, apiKey, model, signal }) returning the final answer, or undefined", { flag: "agent" });
    if (agent !== undefined) void this.endpoint; // a clear error now when the run serves no endpoint
    this.svc.agentFn = agent;
  }

  // ── debugging an episode ───────────────────────────────────────────

  /**
   * Replays sample `sample` of a held step (the trajectory table's `i`)
   * exactly: its rollout call runs again at the policy version it was
   * sampled with, its row seed and what its environment inserted, on a
   * rollout executor's replay engine, and every token and logprob is
   * checked equal to the recording (ReplayMismatchError names the first
   * that is not). The episode shows each token's probability, entropy and
   * alternatives, and branches from any point (`ep.at(turn, token).force(…)
   * .continue()`). `version` replays it at another version (not compared);
   * `environment: "current"` runs the tools again as loaded now.
   */
  async replay(o: ReplayOptions & { version?: number }): Promise<EpisodeReplay> {
    return (await import("../replay/run-replay.js")).replayEpisode(this.replayContext(), o);
  }

  /** A what-if branch of a held sample (what `EpisodeReplay.at(…).force(…).continue()` runs): its episode and reward. */
  async branch(ask: BranchAsk): Promise<{ episode: ReplayJSON; reward?: number }> {
    return (await import("../replay/run-replay.js")).branchEpisode(this.replayContext(), ask);
  }

  /** A held sample's episode under several policy versions: each version's logprob of every generated token, and the episode re-sampled at each with the same seed. */
  async compareVersions(o: { step?: number; sample: number }, versions: number[]): Promise<VersionComparison> {
    return (await import("../replay/run-replay.js")).compareVersions(this.replayContext(), o, versions);
  }

  /** The policy versions kept for replays beyond the live weights object, and their bytes. */
  keptVersions(): { ranges: Array<[number, number]>; bytes: number } {
    return { ranges: this.svc.history?.ranges() ?? [], bytes: this.svc.history?.bytes() ?? 0 };
  }

  private replayContext(): ReplayContext {
    return { svc: this.svc, results: this.results, reward: () => this.reward, nextKeys: () => replayKeys(this.opts.name, ++this.replays) };
  }

  /** Makes the rollout executors import the run's agent module afresh from the next rollout (an edited agent). */
  reloadAgent(): { revision: number } {
    if (this.busy) throw new RunError("a step is running on this run; reload the agent between steps", { run: this.opts.name, step: this.stepNo + 1 });
    this.svc.agentRevision = (this.svc.agentRevision ?? 0) + 1;
    return { revision: this.svc.agentRevision };
  }

  /** Scores a batch with `reward` (default the run's) and computes group advantages; its trajectories are deleted once read. */
  async score(batch: Rollouts, reward: RewardFn = this.reward): Promise<Collected> {
    try {
      return await collect(this.svc, batch.parts, reward);
    } finally {
      await this.app.objects.delete(batch.keys);
    }
  }

  /** One update of every trainer rank on `samples` (their advantages; usually the kept ones), without publishing. */
  async trainOn(samples: readonly ScoredSample[]): Promise<TrainResult[]> {
    return trainOn(this.svc, samples);
  }

  /** Publishes the trainers' weights: the next rollouts sync to them. */
  async publish(): Promise<PublishStats | undefined> {
    return (await publish(this.svc)).publish;
  }

  /**
   * Makes every rollout executor load the environment again, its module
   * imported afresh (an edited tool takes effect from the next rollout) and
   * its `init` run again; the engines keep the policy, its weights and the
   * tokenizer (a setup whose model is unchanged does not rebuild them), the
   * trainers and the run's history are untouched. Only the module itself is
   * read again: modules it imports stay as first loaded.
   */
  async reloadEnvironment(): Promise<{ revision: number }> {
    if (this.busy) throw new RunError("a step is running on this run; reload the environment between steps", { run: this.opts.name, step: this.stepNo + 1 });
    const revision = ++this.envRevision;
    this.svc.rolloutSetup = await putRolloutSetup(this.app, this.opts, this.task, revision);
    await this.saveState();
    return { revision };
  }

  // ── the built-in step ─────────────────────────────────────────────────

  /** Runs one training step (and, every `evalEvery` steps, an evaluation). */
  async step(): Promise<StepResult> {
    if (this.busy) throw new RunError("a step is already running on this run; await it before starting another", { run: this.opts.name, step: this.stepNo + 1 });
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
        // Back to where the run last recorded: the step's update (if it got that far) is the step's to take again.
        await this.trainers.restore(err, this.recorded);
        this.svc.updates = this.recorded.updates;
        this.svc.ahead.policyVersion = this.recorded.policyVersion;
        this.svc.trainer = this.trainers.gang;
        ran = await runStep(this.svc, step, this.reward);
      }
      const result = withStepDisplay(ran);
      this.stepNo = step;
      await this.record(step, result, t0);
      return result;
    } finally {
      this.busy = false;
    }
  }

  /** Records step `step`: its checks, its evaluation (every evalEvery), metrics.jsonl, checkpoint.json, the run's state, its snapshot. */
  private async record(step: number, result: StepResult, t0: number): Promise<void> {
    const m = result.metrics;
    const o = this.opts;
    const emit = o.onEvent;
    emit?.({ type: "sync", step, bytes: m.sync_bytes, executors: m.sync_executors, version: m.weights_version });
    // Behind by a version or more, the gap is the policy's own change: the check means "stale or different numerics" only in sync.
    const inSync = o.maxLag === 0 || m.policy_lag_max === 0;
    if (inSync && m.logprob_gap !== undefined && m.logprob_gap > o.logprobGapWarn) {
      const text = `the sampler's logprobs differ from the trainer's by ${m.logprob_gap.toFixed(4)} per token on average (max ${(m.logprob_gap_max ?? NaN).toFixed(4)}; warn above ${o.logprobGapWarn}): a rollout may hold stale weights, or its numerics differ from the trainer's`;
      o.log(`warning: step ${step}: ${text}`);
      emit?.({ type: "warning", step, text });
    }
    if (m.env_errors) o.log(`warning: step ${step}: the environment failed on ${m.env_errors} sample(s), left out of training; the first: ${result.samples.find((s) => s.error)?.error ?? "?"}`);
    if (m.agent_failures) o.log(`warning: step ${step}: the agent failed on ${m.agent_failures} episode(s), left out of training; the first: ${result.samples.find((s) => s.error)?.error ?? "?"}`);
    for (const text of newAlarms(m, result.examples ?? {}, this.alarmsRaised)) {
      o.log(`warning: step ${step}: ${text}`);
      emit?.({ type: "warning", step, text });
    }
    if (o.evalEvery > 0 && step % o.evalEvery === 0) {
      const ev = await this.evaluate();
      m.eval_em = ev.em;
      m[`eval_${this.task.environment.words.calls}`] = ev.callsPerSample;
      const by = emByCategory(ev);
      if (by) m.eval_em_by = by;
    }
    m.step_s = (performance.now() - t0) / 1000;
    setUtilisation(m, o);
    this.history.push(m);
    appendFileSync(path.join(o.out, "metrics.jsonl"), `${JSON.stringify(m)}\n`);
    writeCheckpointJson(o.out, { step, app: this.app.name, weightsKey: this.svc.weightsKey, rolloutSetup: this.svc.rolloutSetup, lastTrajectories: result.trajectories });
    await this.saveState();
    if (o.snapshotEvery > 0 && step % o.snapshotEvery === 0) {
      try {
        await this.snapshot();
      } catch (err) {
        // The step is complete and recorded; the loss is the next step's to handle (restored when nothing was trained since the last snapshot).
        if (!(err instanceof GangFailedError)) throw err;
        o.log(`warning: step ${step} is recorded, but the trainer gang was lost before its snapshot: ${err.message}`);
      }
    }
    // A step that leaves the inspection window takes its objects with it.
    for (const old of this.results.add(result)) await this.app.objects.delete(stepKeys(o.name, old.metrics.step));
    emit?.({ type: "step", step, metrics: m });
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

  /** Greedy answers on the held-out items; the task's exact match. */
  async evaluate(): Promise<EvalResult> {
    const ev = await evaluate(this.svc, ++this.evals);
    this.opts.onEvent?.({ type: "eval", step: this.stepNo, em: ev.em, callsPerSample: ev.callsPerSample, calls: this.task.environment.words.calls });
    return ev;
  }

  /**
   * Policy digests of every trainer rank and every rollout executor (each
   * addressed by id): all equal when every rollout holds the trainers' latest
   * weights. A rollout that never took a call has digest null.
   */
  async digests(): Promise<{ trainers: Array<{ rank: number; digest: string }>; rollouts: Array<{ executorId: string; digest: string | null; version: number }> }> {
    const trainers = await this.trainers.gang.broadcast("digest", Array.from({ length: this.opts.trainers }, () => [] as []));
    const rollouts = (await this.rollout_.broadcastMembers("digest")).map((m) => m.result);
    return { trainers, rollouts };
  }

  /**
   * Brings every rollout executor (each addressed by id) to the trainers'
   * latest publication without generating; then `digests()` compares all of
   * them. Returns each one's version and the bytes it fetched.
   */
  async syncRollouts(): Promise<Array<{ executorId: string; version: number; bytes: number }>> {
    return (await this.rollout_.broadcastMembers("sync", this.svc.rolloutSetup, this.svc.weightsKey)).map((m) => m.result);
  }

  /** Writes a standalone checkpoint (complete HF folder, exact trainer state, driver state) under `<out>/checkpoint`. */
  async saveCheckpoint(dir = path.join(this.opts.out, "checkpoint")): Promise<string> {
    return writeStandaloneCheckpoint(this.app, this.trainers.gang, dir, this.task.tokenizer, {
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

  /** Settles the rollouts started ahead and deletes this driver's steps, evaluations and batches (the held results go with them). */
  private async leave(): Promise<void> {
    await this.svc.ahead.discard();
    this.results.clear();
    // Scratch objects: should the head be unreachable now, it deletes them when it releases the app.
    await dropSessionObjects(this.app, this.opts.name).catch(() => undefined);
  }
}
