/**
 * The rollout service (a pool): each executor keeps a tensor engine with the
 * policy, the tokenizer and the run's environment (built once here by its
 * `init`, so a tool's warm state, an index or a connection, never waits on
 * another service). Before each batch it brings its weights to the latest
 * publication by reading only what it has not applied, from its node's copy.
 * Calls on one executor run one after another (even with a service
 * concurrency above 1), so new weights arrive between calls, never in the
 * middle of a sample; every trajectory names the policy version it was
 * sampled with.
 */
import { createHash, randomUUID } from "node:crypto";
import type { ObjectRef } from "../../cache/object-cache.js";
import { importServiceModule } from "../../runtime/import-module.js";
import type { ExecutorContext } from "../../runtime/types.js";
import { TensorEngine, deriveSeed } from "../../tensor/index.js";
import { loadEnvironment, type Environment, type EnvironmentSpec } from "../environment.js";
import { runEpisodes, type EpisodeRow } from "../episodes.js";
import { EnvironmentError } from "../errors.js";
import { tokenizerFromFiles, type TextTokenizer, type TokenizerFiles } from "../text/tokenizer.js";
import type { ModelShape, RolloutRequest, RolloutResult, Trajectory } from "../types.js";
import { applyPublications, type PublicationRecord, type SyncResult } from "./weights.js";

export type { RolloutItem, RolloutRequest, RolloutResult, Trajectory } from "../types.js";

/** Everything a rollout executor needs to set itself up; shipped once by reference. */
export interface RolloutSetup {
  /** The policy's shape; its weights come from the publication. */
  model: ModelShape;
  /** The tokenizer's raw files. */
  tokenizer: TokenizerFiles;
  /** The run's environment (its module and export) and its data for `init` (its recipe's). */
  environment: EnvironmentSpec;
  envData: unknown;
  /** The longest a tool call may take before its sample fails. */
  toolTimeoutMs?: number;
  /** Bumped by `run.reloadEnvironment()`: the environment's module is imported afresh (the policy stays). */
  envRevision?: number;
  threads: number;
  /** Weights dtype: `auto` is bf16 on CUDA, fp32 on CPU. */
  dtype: "auto" | "bfloat16" | "float32";
}

/** The service class executors load. */
export class RolloutService {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  private setupKey = "";
  /** What the engine's model was set up from (a new setup with the same keeps the engine, its policy and weights). */
  private modelKey = "";
  private tokenizer!: TextTokenizer;
  private env?: Environment;
  private toolTimeoutMs?: number;
  private weights: PublicationRecord = { version: 0 };
  private syncsToSkip = 0;
  /** The call running on this executor: the next one waits for it (weights change only between calls). */
  private turn: Promise<unknown> = Promise.resolve();

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
  }

  private async setup(ref: ObjectRef): Promise<void> {
    const key = `${ref.key}@${ref.version}`;
    if (key === this.setupKey) return;
    const s = await this.ctx.objects.get<RolloutSetup>(ref);
    const modelKey = createHash("sha256").update(JSON.stringify([s.model, s.tokenizer, s.threads, s.dtype])).digest("hex");
    if (modelKey !== this.modelKey) {
      this.tokenizer = tokenizerFromFiles(s.tokenizer);
      // One engine per executor (its torch threads are fixed when it starts).
      this.engine ??= await this.startEngine({ HEARTH_THREADS: String(s.threads) });
      this.modelKey = "";
      await this.engine.initModel({ config: s.model.config, overrides: s.model.overrides, seed: 0, threads: s.threads, dtype: s.dtype });
      await this.engine.setVocab(this.tokenizer.pieces());
      // A fresh model needs the full publication again.
      this.weights = { version: 0 };
      this.modelKey = modelKey;
    }
    // The environment's warm state, built once for this setup (a new setup builds it again; after the first, its module is read afresh: an edited tool).
    const fresh = this.env !== undefined;
    await this.env?.close?.();
    this.env = undefined;
    const env = await loadEnvironment(s.environment, (m) => importServiceModule(m, { fresh }));
    try {
      await env.init?.({ executorId: this.ctx.executorId, objects: this.ctx.objects, data: s.envData });
    } catch (err) {
      throw new EnvironmentError(`environment '${env.name}' (${s.environment.module}#${s.environment.export}) failed to initialise on executor ${this.ctx.executorId}: ${(err as Error)?.message ?? String(err)}`, { environment: env.name, cause: err });
    }
    this.env = env;
    this.toolTimeoutMs = s.toolTimeoutMs;
    this.setupKey = key;
  }

  /** Generates `groupSize` episodes per item with the latest published weights. */
  async rollout(req: RolloutRequest): Promise<RolloutResult> {
    const run = this.turn.then(() => this.rolloutNow(req));
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** Starts a tensor engine (a subclass may give a stand-in, e.g. a simulated one for benchmarks). */
  protected startEngine(env: Record<string, string>): Promise<TensorEngine> {
    return TensorEngine.start({ env });
  }

  private async rolloutNow(req: RolloutRequest): Promise<RolloutResult> {
    const tCall = performance.now();
    await this.setup(req.setup);
    const t0 = performance.now();
    let syncBytes = 0;
    if (this.syncsToSkip > 0) this.syncsToSkip--;
    else syncBytes = (await this.syncWeights(req.weights)).bytes;
    const syncSeconds = (performance.now() - t0) / 1000;
    const env = this.env!;
    const rows: EpisodeRow[] = [];
    const seeds: number[] = [];
    for (const item of req.items) {
      let ids: number[] | undefined;
      for (let g = 0; g < req.groupSize; g++) {
        const start = env.reset({ id: item.id, question: item.question, golds: [] });
        // Every sample of an item has the same prompt (the environment's state is the sample's own).
        ids ??= this.tokenizer.encode(this.tokenizer.chat(start.system, start.user));
        rows.push({ prompt: ids, state: start.state, label: `${item.id}#${g}` });
        if (item.seed !== undefined) seeds.push(deriveSeed(item.seed, g));
      }
    }
    const limits = seeds.length === rows.length ? { ...req.limits, seeds } : req.limits;
    const t1 = performance.now();
    const episodes = await runEpisodes(this.engine!, this.tokenizer, env, rows, { ...limits, toolTimeoutMs: this.toolTimeoutMs });
    const policyVersion = this.weights.version;
    const trajectories: Trajectory[] = episodes.map((e, i) => ({
      itemId: req.items[Math.floor(i / req.groupSize)]!.id,
      group: Math.floor(i / req.groupSize),
      ...e,
      policyVersion,
    }));
    // Scratch: if the driver that owns it vanishes, the head deletes it with the app.
    const ref = await this.ctx.objects.put(trajectories, { key: req.keys === undefined ? undefined : `${req.keys}traj-${randomUUID()}`, scratch: true });
    return {
      trajectories: ref,
      weightsVersion: this.weights.version,
      executorId: this.ctx.executorId,
      syncBytes,
      syncSeconds,
      generateSeconds: (performance.now() - t1) / 1000,
      busySeconds: (performance.now() - tCall) / 1000,
      tokens: episodes.reduce((n, e) => n + e.tokens.length, 0),
    };
  }

  /**
   * Brings this executor's policy to the latest publication of `weights`
   * (what every rollout call does first) without generating, in turn with
   * its calls: so that a check can then compare every executor's digest
   * with the trainers'. Returns the version held and the bytes fetched.
   */
  async sync(setup: ObjectRef, weights: string): Promise<{ executorId: string; version: number; bytes: number }> {
    const run = this.turn.then(async () => {
      await this.setup(setup);
      const r = await this.syncWeights(weights);
      return { executorId: this.ctx.executorId, version: this.weights.version, bytes: r.bytes };
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** Applies what was published since the version held; a sync that failed midway leaves the engine holding no known version (the next applies the base whole). */
  private async syncWeights(weights: string): Promise<SyncResult> {
    try {
      const r = await applyPublications(this.ctx.objects, weights, this.engine!, this.weights);
      this.weights = { version: r.version, cache: r.cache };
      return r;
    } catch (err) {
      this.weights = { version: 0 };
      throw err;
    }
  }

  /**
   * Fault injection for the live agreement checks: the next `n` rollout calls
   * on this executor skip the weight sync and sample with the weights it holds.
   */
  async skipSyncs(n: number): Promise<{ executorId: string; skipping: number }> {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`skipSyncs needs a whole number ≥ 0; got ${String(n)}`);
    this.syncsToSkip = n;
    return { executorId: this.ctx.executorId, skipping: n };
  }

  /**
   * One turn of this executor's environment, outside any episode: the
   * observation it answers a turn `text` that stopped at `stop` with (what
   * a tool would insert), for checks that every member's tool works.
   */
  async tool(setup: ObjectRef, question: string, text: string, stop: string): Promise<{ executorId: string; step: unknown }> {
    await this.setup(setup);
    const env = this.env!;
    const start = env.reset({ id: "tool-check", question, golds: [] });
    return { executorId: this.ctx.executorId, step: await env.step(start.state, { text, stop, callsLeft: 1 }) };
  }

  /** sha256 of the policy's bf16 weights and the publication version it holds. */
  async digest(): Promise<{ digest: string | null; version: number; executorId: string }> {
    // An executor that never took a rollout holds no policy yet.
    const d = this.engine && this.setupKey !== "" ? (await this.engine.digest()).digest : null;
    return { digest: d, version: this.weights.version, executorId: this.ctx.executorId };
  }

  async close(): Promise<void> {
    await this.env?.close?.();
    await this.engine?.close();
  }
}
