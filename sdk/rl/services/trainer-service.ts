/**
 * The trainer service (a gang): every rank keeps a tensor engine with the
 * fp32 master policy, the frozen reference and the AdamW state warm between
 * steps. Each rank trains on its slice of the batch (an object reference);
 * gradients are all-reduced over gloo (CPU) or nccl (GPU); rank 0 publishes
 * the new bf16 weights to the cache: full shards first, then exact patches.
 * Model folders and trainer state arrive as shipped folders (read in place,
 * or file by file through the node-local cache), never as one object.
 */
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { openFolder, shipFolder, writableInPlace, type FolderRef } from "../../cache/folder.js";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { ExecutorContext } from "../../runtime/types.js";
import { gangDistributed } from "../../runtime/gang.js";
import { interfaceToward } from "../../runtime/route.js";
import { TensorEngine } from "../../tensor/index.js";
import type { TrainMetrics, TrainerOptions } from "../../tensor/types.js";
import { HearthError } from "../../errors/index.js";
import type { ModelShape, PublishStats, TrainResult, TrainSlice } from "../types.js";
import { WeightPublisher, type RebasePolicy } from "./weights.js";
import { checkSampled } from "../scoring/batch.js";

/** How a trainer gang sets itself up. */
export interface TrainerSetup {
  model: ModelShape & { seed?: number };
  /** HF-layout weights to start from (overrides the random init). */
  checkpoint?: FolderRef;
  /** Exact trainer state to resume (from `save`). */
  state?: FolderRef;
  trainer: TrainerOptions;
  /** Cache key rank 0 publishes weights to. */
  weights: string;
  threads: number;
  backend: "gloo" | "nccl";
  /** When rank 0 publishes a fresh base instead of another patch. */
  rebase?: RebasePolicy;
  /** The run this setup belongs to: a driver that reattaches finds it with `status`. */
  runId?: string;
  /** Restored from a snapshot: rank 0's first publication is a fresh base numbered so (the version the rollouts hold). */
  publishVersion?: number;
  /** The RL updates this run's trainers had taken (a restore from a snapshot carries the snapshot's count; default 0). */
  updates?: number;
}

export type { TrainSlice, TrainResult } from "../types.js";

/** Where `save` writes: a folder on the driver's host (written in place when this executor runs there). */
export interface SaveTarget {
  host: string;
  /** Absolute folder; `model/` and (with `state`) `state/` go under it. */
  dir: string;
  state: boolean;
}

/** What `save` returns on rank 0: written in place, or shipped back as folders. */
export interface SaveResult {
  rank: number;
  inPlace?: boolean;
  model?: FolderRef;
  state?: FolderRef;
}

/** The service class executors load. */
export class TrainerService {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  private setupRef?: string;
  private weightsKey = "";
  private mode: "rl" | "sft" | undefined;
  private scratch?: string;
  private publisher?: WeightPublisher;
  private runId?: string;
  /** The version of the last publication (rank 0), or 0. */
  private published = 0;
  /** RL updates (train calls) since this run's setup. */
  private updates = 0;

  async init(ctx: ExecutorContext): Promise<void> {
    if (ctx.rank === null || ctx.worldSize === null || ctx.rendezvous === null) {
      throw new HearthError("TrainerService runs as a gang (autoscale: false)");
    }
    this.ctx = ctx;
  }

  /**
   * Builds the policy (from a shipped checkpoint or a seeded random init),
   * becomes a trainer for `mode` ("sft": no reference, no KL; "rl": GRPO with
   * the frozen reference), optionally restores an exact state, and on rank 0
   * publishes full weights. Idempotent for the same setup object and mode.
   */
  async setup(ref: ObjectRef, mode: "rl" | "sft"): Promise<{ rank: number; params: number; publish?: TrainResult["publish"]; device?: string; inPlace?: boolean; blas?: string }> {
    const key = `${ref.key}@${ref.version}`;
    if (key === this.setupRef && mode === this.mode) return { rank: this.ctx.rank!, params: 0 };
    const s = await this.ctx.objects.get<TrainerSetup>(ref);
    // One engine per executor: its process group is made once and kept across setups.
    // gloo's interface: the caller's, else the one on the route to the rendezvous ("lo" on one machine, e.g. eth0 across hosts).
    const ifname = process.env.GLOO_SOCKET_IFNAME ?? (await interfaceToward(this.ctx.rendezvous!.host, this.ctx.rendezvous!.port));
    this.engine ??= await this.startEngine({ HEARTH_THREADS: String(s.threads), GLOO_SOCKET_IFNAME: ifname });
    const engine = this.engine;
    const checkpoint = s.checkpoint ? await openFolder(this.ctx.objects, s.checkpoint) : undefined;
    const init = await engine.initModel({
      config: checkpoint?.dir ?? s.model.config,
      overrides: checkpoint ? undefined : s.model.overrides,
      checkpoint: checkpoint?.dir,
      seed: s.model.seed ?? 0,
      threads: s.threads,
      dtype: "float32",
    });
    const trainer = mode === "sft" ? { ...s.trainer, klCoef: 0 } : s.trainer;
    await engine.trainInit(trainer, gangDistributed(this.ctx, s.backend));
    if (s.state) {
      const state = await openFolder(this.ctx.objects, s.state);
      await engine.loadState(state.dir);
    }
    this.weightsKey = s.weights;
    this.setupRef = key;
    this.mode = mode;
    this.runId = s.runId;
    this.publisher = this.ctx.rank === 0 ? new WeightPublisher(this.ctx.objects, this.weightsKey, engine, s.rebase) : undefined;
    const publish = mode === "rl" ? await this.publisher?.publish({ version: s.publishVersion }) : undefined;
    this.published = publish?.version ?? 0;
    this.updates = s.updates ?? 0;
    return { rank: this.ctx.rank!, params: init.params, publish, device: init.device, inPlace: checkpoint?.inPlace, blas: init.blas };
  }

  /** Starts a tensor engine (a subclass may give a stand-in, e.g. a simulated one for benchmarks). */
  protected startEngine(env: Record<string, string>): Promise<TensorEngine> {
    return TensorEngine.start({ env });
  }

  private need(): TensorEngine {
    if (!this.engine) throw new HearthError("this trainer has no model yet: call setup first");
    return this.engine;
  }

  /**
   * One GRPO step on this rank's slice; with `publish` (the default) rank 0
   * then publishes the new weights, as `publish()` would.
   */
  async train(slice: ObjectRef, publish = true): Promise<TrainResult> {
    const t0 = performance.now();
    const engine = this.need();
    const b = await this.ctx.objects.get<TrainSlice>(slice);
    // Agent episodes: the ids trained on must be the ids their engine sampled (digests from the engine).
    checkSampled(b);
    const metrics = await engine.trainStep(b);
    this.updates++;
    this.ctx.objects.forget(slice);
    const p = publish ? await this.publishNow() : {};
    return { rank: this.ctx.rank!, metrics, ...p, seconds: (performance.now() - t0) / 1000 };
  }

  /**
   * The trainer's own forward pass over `tokens`: at each position, the k
   * most likely next tokens and their logprobs (what a replay's alternatives
   * are checked against; this rank's current weights).
   */
  async topK(tokens: number[], k: number): Promise<{ rank: number; ids: Int32Array; logprobs: Float32Array }> {
    const r = await this.need().topK(Int32Array.from(tokens), 1, tokens.length, k);
    return { rank: this.ctx.rank!, ...r };
  }

  /** Rank 0 publishes the weights it holds (a patch against the last publication, or a fresh base); other ranks have nothing to publish. */
  async publish(): Promise<{ rank: number; publish?: PublishStats; publishSeconds?: number }> {
    this.need();
    return { rank: this.ctx.rank!, ...(await this.publishNow()) };
  }

  private async publishNow(): Promise<{ publish?: PublishStats; publishSeconds?: number }> {
    const t = performance.now();
    const publish = await this.publisher?.publish();
    if (!publish) return {};
    this.published = publish.version;
    return { publish, publishSeconds: (performance.now() - t) / 1000 };
  }

  /**
   * One supervised step (the bootstrap): maximise the likelihood of masked-in tokens.
   * With `alone`, this rank steps on the whole batch without the other ranks (no
   * all-reduce), and a rank given `null` does nothing: on shared CPU cores a tiny
   * model's data-parallel step costs more in gloo than it saves, so the warm start runs
   * on rank 0, whose saved checkpoint every rank then loads.
   */
  async sft(slice: ObjectRef | null, alone = false): Promise<TrainResult> {
    const t0 = performance.now();
    if (slice === null) return { rank: this.ctx.rank!, metrics: { tokens: 0, rows: 0 } as TrainMetrics, seconds: 0 };
    const engine = this.need();
    const b = await this.ctx.objects.get<TrainSlice>(slice);
    // Without old logprobs the engine uses the policy's own (ratio 1), so the clipped
    // policy-gradient loss with advantage 1 is exactly cross-entropy on masked tokens;
    // its `nll` is that cross-entropy before the step, in the same forward pass.
    const metrics = await engine.trainStep({ rows: b.rows, cols: b.cols, tokens: b.tokens, mask: b.mask, advantages: new Float32Array(b.rows).fill(1), local: alone });
    this.ctx.objects.forget(slice);
    return { rank: this.ctx.rank!, metrics, seconds: (performance.now() - t0) / 1000 };
  }

  /**
   * Rank 0: the model in HF layout (fp32) and, with `target.state`, the exact
   * trainer state. Written straight into `target.dir` when this executor runs
   * on the driver's host; otherwise into a scratch folder shipped back file
   * by file (the driver fetches it, then calls `dropScratch`).
   */
  async save(target: SaveTarget): Promise<SaveResult> {
    if (this.ctx.rank !== 0) return { rank: this.ctx.rank! };
    const engine = this.need();
    // In place only where this executor's user may write (one running as its app's own user often may not).
    const inPlace = target.host === os.hostname() && path.isAbsolute(target.dir) && writableInPlace(target.dir);
    const root = inPlace ? target.dir : (this.scratch = mkdtempSync(path.join(os.tmpdir(), "hearth-save-")));
    const modelDir = path.join(root, "model");
    mkdirSync(modelDir, { recursive: true });
    await engine.saveCheckpoint(modelDir, "float32");
    let stateDir: string | undefined;
    if (target.state) {
      stateDir = path.join(root, "state");
      mkdirSync(stateDir, { recursive: true });
      await engine.saveState(stateDir);
    }
    if (inPlace) {
      if (!existsSync(path.join(modelDir, "config.json"))) throw new HearthError(`the trainer wrote ${modelDir} but cannot see it afterwards`);
      return { rank: 0, inPlace: true };
    }
    const model = await shipFolder(this.ctx.objects, modelDir, { objects: true });
    const state = stateDir ? await shipFolder(this.ctx.objects, stateDir, { objects: true }) : undefined;
    return { rank: 0, inPlace: false, model, state };
  }

  /** Removes the scratch folder of the last `save` that shipped files back. */
  async dropScratch(): Promise<void> {
    if (this.scratch) rmSync(this.scratch, { recursive: true, force: true });
    this.scratch = undefined;
  }

  /** What this rank holds: the run it was set up for and its mode, the optimizer steps taken, the RL updates of this run, and (rank 0) the last published policy version. */
  async status(): Promise<{ rank: number; runId: string | null; mode: string | null; steps: number; updates: number; policyVersion: number }> {
    const steps = this.engine && this.mode ? (await this.engine.stateDigest()).steps : 0;
    return { rank: this.ctx.rank!, runId: this.runId ?? null, mode: this.mode ?? null, steps, updates: this.updates, policyVersion: this.published };
  }

  /** sha256 of this rank's exact trainer state (fp32 master weights; AdamW moments and steps). */
  async stateDigest(): Promise<{ rank: number; weights: string; moments: string; steps: number }> {
    return { rank: this.ctx.rank!, ...(await this.need().stateDigest()) };
  }

  /** sha256 of this rank's bf16 policy. */
  async digest(): Promise<{ rank: number; digest: string }> {
    return { rank: this.ctx.rank!, digest: (await this.need().digest()).digest };
  }

  async close(): Promise<void> {
    await this.engine?.close();
    await this.dropScratch();
  }
}
