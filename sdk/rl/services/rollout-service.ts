/**
 * The rollout service (a pool): each executor keeps a tensor engine with the
 * policy, the tokenizer and an in-memory BM25 index of the corpus (built in
 * the executor, so retrieval never waits on another service). Before each
 * batch it brings its weights to the latest publication by fetching only the
 * patches it has not seen, and the engine loads only the changed tensors.
 * Calls on one executor run one after another (even with a service
 * concurrency above 1), so new weights arrive between calls, never in the
 * middle of a sample; every trajectory names the policy version it was
 * sampled with.
 */
import { randomUUID } from "node:crypto";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { ExecutorContext } from "../../runtime/types.js";
import { TensorEngine, deriveSeed } from "../../tensor/index.js";
import { Bm25Index } from "../../envs/searchr1/retrieval/bm25.js";
import { buildPrompt, runEpisodes, type ProtocolOptions, type ProtocolText } from "../../envs/searchr1/protocol.js";
import type { ModelShape } from "../run/recipe.js";
import { tokenizerFromFiles, type TextTokenizer, type TokenizerFiles } from "../text/tokenizer.js";
import type { Passage } from "../../envs/searchr1/tasks/synthetic.js";
import { applyPublications, type PublicationRecord, type SyncResult } from "./weights.js";

/** Everything a rollout executor needs to set itself up; shipped once by reference. */
export interface RolloutSetup {
  /** The policy's shape; its weights come from the publication. */
  model: ModelShape;
  /** The tokenizer's raw files. */
  tokenizer: TokenizerFiles;
  /** The words the protocol writes (the task recipe's). */
  text: ProtocolText;
  corpus: ObjectRef;
  bm25?: { k1?: number; b?: number };
  threads: number;
  /** Weights dtype: `auto` is bf16 on CUDA, fp32 on CPU. */
  dtype: "auto" | "bfloat16" | "float32";
}

/** One question to roll out. */
export interface RolloutItem {
  id: string;
  question: string;
  /** Seeds the item's samples (sample g gets deriveSeed(seed, g)); absent: the call's batch seed. */
  seed?: number;
}

/** A rollout call. */
export interface RolloutRequest {
  setup: ObjectRef;
  /** The weights object (full shards, then appended patches). */
  weights: string;
  items: RolloutItem[];
  groupSize: number;
  protocol: ProtocolOptions;
  /**
   * The key prefix of the call's trajectories object (a fresh key under it
   * per call): its owner (a step, an evaluation) deletes everything under
   * the prefix, the objects of calls retried after an executor died
   * included. Absent: a key of the cache's choosing.
   */
  keys?: string;
}

/** What a rollout call returns (the trajectories travel by reference). */
export interface RolloutResult {
  trajectories: ObjectRef;
  weightsVersion: number;
  executorId: string;
  /** Weight bytes this call fetched from the cache (0 when already current). */
  syncBytes: number;
  syncSeconds: number;
  generateSeconds: number;
  /** Seconds this executor spent on the call (waiting for an earlier call on it excluded). */
  busySeconds: number;
  tokens: number;
}

/** One trajectory as stored in the cache. */
export interface Trajectory {
  itemId: string;
  group: number;
  promptLength: number;
  tokens: Int32Array;
  mask: Uint8Array;
  logprobs: Float32Array;
  response: string;
  searches: string[];
  finish: string;
  /** The publication version of the weights that sampled it (the trainers' version then). */
  policyVersion: number;
}

/** The service class executors load. */
export class SearchR1Rollout {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  private setupKey = "";
  private tokenizer!: TextTokenizer;
  private text!: ProtocolText;
  private index!: Bm25Index;
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
    this.tokenizer = tokenizerFromFiles(s.tokenizer);
    this.text = s.text;
    // One engine per executor (its torch threads are fixed when it starts).
    this.engine ??= await this.startEngine({ HEARTH_THREADS: String(s.threads) });
    await this.engine.initModel({ config: s.model.config, overrides: s.model.overrides, seed: 0, threads: s.threads, dtype: s.dtype });
    await this.engine.setVocab(this.tokenizer.pieces());
    const corpus = await this.ctx.objects.get<Passage[]>(s.corpus);
    this.index = Bm25Index.build(corpus, s.bm25);
    this.ctx.objects.forget(s.corpus);
    // A fresh model needs the full publication again.
    this.weights = { version: 0 };
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
    const prompts: number[][] = [];
    const seeds: number[] = [];
    for (const item of req.items) {
      const ids = this.tokenizer.encode(buildPrompt(this.tokenizer, this.text, item.question));
      for (let g = 0; g < req.groupSize; g++) {
        prompts.push(ids);
        if (item.seed !== undefined) seeds.push(deriveSeed(item.seed, g));
      }
    }
    const protocol = seeds.length === prompts.length ? { ...req.protocol, seeds } : req.protocol;
    const t1 = performance.now();
    const episodes = await runEpisodes(this.engine!, this.tokenizer, this.text, (q, k) => this.index.search(q, k), prompts, protocol);
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

  /** Searches this executor's index (what a `<search>` in a rollout would get back). */
  async retrieve(setup: ObjectRef, query: string, k = 3): Promise<{ executorId: string; hits: Array<{ title: string; text: string }> }> {
    await this.setup(setup);
    return { executorId: this.ctx.executorId, hits: this.index.search(query, k).map((h) => ({ title: h.title, text: h.text })) };
  }

  /** sha256 of the policy's bf16 weights and the publication version it holds. */
  async digest(): Promise<{ digest: string | null; version: number; executorId: string }> {
    // An executor that never took a rollout holds no policy yet.
    const d = this.engine && this.setupKey !== "" ? (await this.engine.digest()).digest : null;
    return { digest: d, version: this.weights.version, executorId: this.ctx.executorId };
  }

  async close(): Promise<void> {
    await this.engine?.close();
  }
}
