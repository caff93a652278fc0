/**
 * SearchR1Run: the driver of Search-R1 training. Each step fans prompts out to
 * the rollout pool, scores the answers with a swappable reward function,
 * computes group-relative advantages, ships per-rank slices to the trainer
 * gang by reference, and lets rank 0 publish the new weights. Metrics go to
 * metrics.jsonl, the cache objects in use to checkpoint.json, and a
 * standalone checkpoint (weights, optimizer, driver state) allows `resume`.
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ObjectRef } from "../cache/object-cache.js";
import { connect, type App } from "../runtime/app.js";
import type { GangHandle, PoolHandle } from "../runtime/handles.js";
import { HearthError } from "../wire/errors.js";
import { runBootstrap } from "./bootstrap-run.js";
import { buildSlices, scoreSamples, type ScoredSample } from "./batch.js";
import { emReward, type RewardFn } from "./reward.js";
import type { RolloutItem, RolloutResult, RolloutSetup, SearchR1Rollout, Trajectory } from "./rollout-service.js";
import type { Question } from "./synthetic.js";
import { prepareTask, type PreparedTask } from "./task.js";
import type { SearchR1Trainer, ShippedFiles, TrainResult, TrainerSetup } from "./trainer-service.js";
import { packFiles } from "./trainer-service.js";
import { rng } from "./synthetic.js";
import type { DataTable } from "../notebook/index.js";
import { StepStore, rescoreSamples, trainLoop, type TrainOptions } from "./interactive.js";
import { TrajectoryView, trajectoryTable, withStepDisplay, type RescoreView } from "./views.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

/** Options of a run (the CLI flags, with the reference system's meanings). */
export interface SearchR1Options {
  /** `tiny` or an HF model folder. */
  model: string;
  /** `synthetic` or a HotpotQA JSON file. */
  data: string;
  steps: number;
  promptsPerStep: number;
  /** Prompts per rollout call. */
  promptsPerTask: number;
  groupSize: number;
  rollouts: number;
  trainers: number;
  out: string;
  evalEvery: number;
  evalSize: number;
  lr: number;
  klCoef: number;
  maxSearches: number;
  seed: number;
  temperature: number;
  /** Supervised warm start (tiny synthetic only): steps, 0 to skip. */
  bootstrapSteps: number;
  /** A checkpoint folder written by a previous run. */
  resume?: string;
  /** Head endpoint; default the embedded local one. */
  head?: string;
  /** App name (reattach to warm executors). */
  name: string;
  /** Progress lines. */
  log: (line: string) => void;
}

/** Defaults tuned for the embedded default on 2 CPU cores. */
export const DEFAULTS: SearchR1Options = {
  model: "tiny",
  data: "synthetic",
  steps: 150,
  promptsPerStep: 16,
  promptsPerTask: 4,
  groupSize: 8,
  rollouts: 2,
  trainers: 2,
  out: "out",
  evalEvery: 10,
  evalSize: 200,
  lr: 1e-3,
  klCoef: 0.001,
  maxSearches: 4,
  seed: 1,
  temperature: 1,
  bootstrapSteps: 2000,
  name: "search-r1",
  log: (line) => console.log(line),
};

/** One step's metrics (the metrics.jsonl fields). */
export interface StepMetrics {
  step: number;
  reward_mean: number;
  em: number;
  searches_per_sample: number;
  groups_kept: number;
  groups_dropped: number;
  samples_trained: number;
  tokens: number;
  rollout_s: number;
  update_s: number;
  publish_bytes: number;
  step_s: number;
  weights_version: number;
  eval_em?: number;
  eval_searches?: number;
}

/** What `step()` returns. */
export interface StepResult {
  metrics: StepMetrics;
  /** The step's trajectories (one object per rollout call). */
  trajectories: ObjectRef[];
  /** Scored samples, for inspection. */
  samples: ScoredSample[];
}

/** Result of an evaluation. */
export interface EvalResult {
  em: number;
  searchesPerSample: number;
  samples: ScoredSample[];
}

/** A Search-R1 training run on warm executors. */
export class SearchR1Run {
  private reward: RewardFn = emReward;
  private stepNo = 0;
  private busy = false;
  readonly history: StepMetrics[] = [];
  /** The last 50 step results (trajectories included), for inspection and rescoring. */
  readonly results = new StepStore();
  private readonly weightsKey: string;

  private constructor(
    readonly app: App,
    readonly opts: SearchR1Options,
    readonly task: PreparedTask,
    private readonly rollout: PoolHandle<SearchR1Rollout>,
    private readonly trainer: GangHandle<SearchR1Trainer>,
    private readonly rolloutSetup: ObjectRef,
  ) {
    this.weightsKey = `searchr1/${opts.name}/weights`;
  }

  /** Connects, prepares data, starts (or reattaches to) the services, bootstraps if needed, and publishes weights. */
  static async create(partial: Partial<SearchR1Options> = {}): Promise<SearchR1Run> {
    const opts: SearchR1Options = { ...DEFAULTS, ...partial };
    validate(opts);
    const log = opts.log;
    const task = await prepareTask(opts);
    log(`task: ${task.describe}`);
    const app = await connect({ name: opts.name, head: opts.head });
    const corpus = await app.objects.put(task.corpus);
    const setup: RolloutSetup = { model: task.model, tokenizer: task.tokenizer.files, corpus, threads: 1 };
    const rolloutSetup = await app.objects.put(setup);
    const rollout = await app.service<SearchR1Rollout>(
      { module: path.join(HERE, "rollout-service.js"), export: "SearchR1Rollout" },
      { name: "rollout", resreq: "cpu=0.5", warmup: opts.rollouts, max: opts.rollouts },
    );
    const trainer = await app.service<SearchR1Trainer>(
      { module: path.join(HERE, "trainer-service.js"), export: "SearchR1Trainer" },
      { name: "trainer", resreq: "cpu=0.5", warmup: opts.trainers, autoscale: false },
    );
    log(`services ready: ${opts.rollouts} rollout executor(s), a gang of ${opts.trainers} trainer(s)`);
    const run = new SearchR1Run(app, opts, task, rollout, trainer, rolloutSetup);
    await run.start();
    return run;
  }

  private async start(): Promise<void> {
    const o = this.opts;
    mkdirSync(o.out, { recursive: true });
    let checkpoint: ObjectRef | undefined;
    let state: ObjectRef | undefined;
    if (o.resume) {
      const driver = JSON.parse(readFileSync(path.join(o.resume, "driver-state.json"), "utf8")) as { step: number; history: StepMetrics[] };
      checkpoint = await this.app.objects.put(packFiles(path.join(o.resume, "model")));
      state = await this.app.objects.put(packFiles(path.join(o.resume, "state")));
      this.stepNo = driver.step;
      this.history.push(...driver.history);
      o.log(`resuming from ${o.resume} at step ${driver.step}`);
    } else if (this.task.modelDir) {
      checkpoint = await this.app.objects.put(shipModelDir(this.task.modelDir));
    } else if (o.bootstrapSteps > 0 && this.task.synthetic) {
      checkpoint = await runBootstrap(this.app, this.trainer, this.task, o);
    }
    const setup: TrainerSetup = {
      model: { ...this.task.model, seed: o.seed },
      checkpoint,
      state,
      trainer: { lr: o.lr, klCoef: o.klCoef, microBatchSize: 16, gradClip: 1.0, ...this.task.trainer },
      weights: this.weightsKey,
      threads: 1,
    };
    const ref = await this.app.objects.put(setup);
    const res = await this.trainer.broadcast("setup", Array.from({ length: o.trainers }, () => [ref, "rl"] as [ObjectRef, "rl"]));
    o.log(`trainers ready (${res[0]!.params.toLocaleString()} parameters); weights published (${res[0]!.publish?.bytes ?? 0} bytes)`);
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

  /** Rolls out questions (G samples each) across the pool. */
  private async rollouts(questions: Question[], groupSize: number, temperature: number, seed: number): Promise<Array<{ q: Question[]; r: RolloutResult }>> {
    const chunks: Question[][] = [];
    for (let i = 0; i < questions.length; i += this.opts.promptsPerTask) chunks.push(questions.slice(i, i + this.opts.promptsPerTask));
    return Promise.all(
      chunks.map(async (q, i) => {
        const items: RolloutItem[] = q.map((x) => ({ id: x.id, question: x.question }));
        const r = await this.rollout.call("rollout", {
          setup: this.rolloutSetup,
          weights: this.weightsKey,
          items,
          groupSize,
          protocol: { maxSearches: this.opts.maxSearches, temperature, seed: seed * 1000 + i },
        });
        return { q, r };
      }),
    );
  }

  private async collect(parts: Array<{ q: Question[]; r: RolloutResult }>): Promise<ReturnType<typeof scoreSamples>> {
    const groups: Array<{ question: string; golds: string[]; samples: Trajectory[] }> = [];
    for (const { q, r } of parts) {
      const trajs = await this.app.objects.get<Trajectory[]>(r.trajectories);
      q.forEach((question, g) => groups.push({ question: question.question, golds: question.golds, samples: trajs.filter((t) => t.group === g) }));
    }
    return scoreSamples(groups, this.reward);
  }

  /** Runs one training step. */
  async step(): Promise<StepResult> {
    if (this.busy) throw new HearthError("a step is already running on this run; await it before starting another");
    this.busy = true;
    try {
      const result = withStepDisplay(await this.doStep());
      this.results.add(result);
      return result;
    } finally {
      this.busy = false;
    }
  }

  private async doStep(): Promise<StepResult> {
    const o = this.opts;
    const step = this.stepNo + 1;
    const t0 = performance.now();
    const r = rng(o.seed * 100_003 + step);
    const questions = Array.from({ length: o.promptsPerStep }, () => this.task.train[Math.floor(r() * this.task.train.length)]!);
    const parts = await this.rollouts(questions, o.groupSize, o.temperature, step);
    const scored = await this.collect(parts);
    const t1 = performance.now();
    const kept = scored.samples.filter((s) => s.kept);
    let update: TrainResult[] = [];
    if (kept.length > 0) {
      const slices = buildSlices(kept.map((s) => ({ tokens: s.tokens, mask: s.mask, logprobs: s.logprobs, advantage: s.advantage })), o.trainers);
      const refs = await Promise.all(slices.map((s) => this.app.objects.put(s)));
      update = await this.trainer.broadcast("train", refs.map((ref) => [ref] as [ObjectRef]));
      await Promise.all(refs.map((ref) => this.app.objects.delete(ref.key)));
    }
    const t2 = performance.now();
    const metrics: StepMetrics = {
      step,
      reward_mean: mean(scored.samples.map((s) => s.reward)),
      em: mean(scored.samples.map((s) => emReward(s.response, s.golds))),
      searches_per_sample: mean(scored.samples.map((s) => s.searches.length)),
      groups_kept: scored.groupsKept,
      groups_dropped: scored.groupsDropped,
      samples_trained: kept.length,
      tokens: scored.samples.reduce((a, s) => a + s.tokens.length, 0),
      rollout_s: (t1 - t0) / 1000,
      update_s: (t2 - t1) / 1000,
      publish_bytes: update[0]?.publish?.bytes ?? 0,
      step_s: 0,
      weights_version: update[0]?.publish?.cacheVersion ?? parts[0]?.r.weightsVersion ?? 0,
    };
    this.stepNo = step;
    if (o.evalEvery > 0 && step % o.evalEvery === 0) {
      const ev = await this.evaluate();
      metrics.eval_em = ev.em;
      metrics.eval_searches = ev.searchesPerSample;
    }
    metrics.step_s = (performance.now() - t0) / 1000;
    this.history.push(metrics);
    appendFileSync(path.join(o.out, "metrics.jsonl"), `${JSON.stringify(metrics)}\n`);
    this.writeCheckpointJson(parts.map((p) => p.r.trajectories));
    return { metrics, trajectories: parts.map((p) => p.r.trajectories), samples: scored.samples };
  }

  /** Runs `n` steps with a progress bar; stops between steps when `signal` aborts or the kernel interrupts, leaving the run consistent. */
  async train(n: number, opts: TrainOptions = {}): Promise<StepMetrics[]> {
    return trainLoop(n, () => this.step(), opts);
  }

  /** A held step's result (default the latest; the last 50 are held). */
  result(step?: number): StepResult {
    return this.results.get(step);
  }

  /** A step's trajectories as a table (question, golds, response, searches, answer, reward, advantage, kept, tokens, masked). */
  trajectories(step?: number): DataTable {
    const r = this.results.get(step);
    return trajectoryTable(r.samples, { step: r.metrics.step });
  }

  /** Trajectory `i` of a step, its prompt, generated and retrieved spans told apart. */
  trajectory(i: number, step?: number): TrajectoryView {
    const r = this.results.get(step);
    const s = r.samples[i];
    if (!Number.isInteger(i) || !s) throw new HearthError(`trajectory ${String(i)}: step ${r.metrics.step} has trajectories 0–${r.samples.length - 1}`);
    return new TrajectoryView(s, this.task.tokenizer, i, r.metrics.step);
  }

  /** Recomputes a held step's rewards and advantages with `fn` (the stored samples are replaced; the step's update is not redone). */
  rescore(step: number, fn: RewardFn): RescoreView {
    const view = rescoreSamples(step, this.results.get(step).samples, fn, this.opts.groupSize);
    this.results.replaceSamples(step, [...view.after]);
    return view;
  }

  /** Greedy answers on the held-out questions; exact match. */
  async evaluate(): Promise<EvalResult> {
    const parts = await this.rollouts(this.task.heldOut, 1, 0, 0);
    const scored = await this.collect(parts);
    return {
      em: mean(scored.samples.map((s) => emReward(s.response, s.golds))),
      searchesPerSample: mean(scored.samples.map((s) => s.searches.length)),
      samples: scored.samples,
    };
  }

  /** Rollout and trainer policy digests (equal when every rollout holds the trainers' latest weights). */
  async digests(): Promise<{ trainers: string[]; rollouts: string[] }> {
    const trainers = (await this.trainer.broadcast("digest", Array.from({ length: this.opts.trainers }, () => [] as []))).map((d) => d.digest);
    const rollouts: string[] = [];
    for (let i = 0; i < this.opts.rollouts * 2; i++) rollouts.push((await this.rollout.call("digest")).digest);
    return { trainers, rollouts: [...new Set(rollouts)] };
  }

  /** Writes a standalone checkpoint (HF weights, exact trainer state, driver state) under `<out>/checkpoint`. */
  async saveCheckpoint(dir = path.join(this.opts.out, "checkpoint")): Promise<string> {
    const saved = await this.trainer.broadcast("save", Array.from({ length: this.opts.trainers }, () => [] as []));
    const rank0 = saved.find((s) => s.rank === 0)!;
    for (const [sub, ref] of [["model", rank0.model!], ["state", rank0.state!]] as const) {
      const files = await this.app.objects.get<ShippedFiles>(ref);
      mkdirSync(path.join(dir, sub), { recursive: true });
      for (const [name, data] of Object.entries(files.files)) writeFileSync(path.join(dir, sub, name), data);
      await this.app.objects.delete(ref.key);
    }
    writeFileSync(path.join(dir, "driver-state.json"), JSON.stringify({ step: this.stepNo, history: this.history, options: { ...this.opts, log: undefined } }, null, 2));
    return dir;
  }

  private writeCheckpointJson(trajectories: ObjectRef[]): void {
    const doc = {
      step: this.stepNo,
      app: this.app.name,
      weights: { key: this.weightsKey },
      rolloutSetup: this.rolloutSetup,
      lastTrajectories: trajectories,
      standalone: existsSync(path.join(this.opts.out, "checkpoint")) ? path.join(this.opts.out, "checkpoint") : null,
    };
    writeFileSync(path.join(this.opts.out, "checkpoint.json"), JSON.stringify(doc, null, 2));
  }

  /** Leaves the executors warm (for the app's keep-alive) and disconnects. */
  async disconnect(): Promise<void> {
    await this.app.disconnect();
  }

  /** Stops the services and disconnects. */
  async close(): Promise<void> {
    await this.app.close();
  }
}

function mean(xs: number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}

function shipModelDir(dir: string): ShippedFiles {
  const all = packFiles(dir);
  return { files: Object.fromEntries(Object.entries(all.files).filter(([n]) => n === "config.json" || n.endsWith(".safetensors") || n.endsWith(".safetensors.index.json"))) };
}

function validate(o: SearchR1Options): void {
  const ints: Array<keyof SearchR1Options> = ["steps", "promptsPerStep", "promptsPerTask", "groupSize", "rollouts", "trainers", "evalSize", "maxSearches", "bootstrapSteps"];
  for (const k of ints) {
    const v = o[k] as number;
    if (!Number.isInteger(v) || v < (k === "steps" || k === "bootstrapSteps" || k === "maxSearches" ? 0 : 1)) {
      throw new HearthError(`--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a whole number ≥ ${k === "steps" || k === "bootstrapSteps" || k === "maxSearches" ? 0 : 1}; got ${String(v)}`);
    }
  }
  for (const k of ["lr", "klCoef", "temperature"] as const) {
    if (typeof o[k] !== "number" || !Number.isFinite(o[k]) || o[k] < 0) throw new HearthError(`--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a number ≥ 0; got ${String(o[k])}`);
  }
  if (o.evalEvery < 0) throw new HearthError("--eval-every must be ≥ 0");
  if (o.resume && !existsSync(path.join(o.resume, "driver-state.json"))) {
    throw new HearthError(`--resume ${o.resume}: no driver-state.json there (expected a folder written by a previous run's checkpoint)`);
  }
}
