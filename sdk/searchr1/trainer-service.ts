/**
 * The trainer service (a gang): every rank keeps a tensor engine with the
 * fp32 master policy, the frozen reference and the AdamW state warm between
 * steps. Each rank trains on its slice of the batch (an object reference);
 * gradients are all-reduced over gloo (CPU) or nccl (GPU); rank 0 publishes
 * the new bf16 weights to the cache: full shards first, then exact patches.
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { ObjectRef } from "../cache/object-cache.js";
import type { ExecutorContext } from "../runtime/types.js";
import { TensorEngine } from "../tensor/index.js";
import type { TrainMetrics, TrainerOptions } from "../tensor/types.js";
import { HearthError } from "../wire/errors.js";
import { publishWeights } from "./weights.js";

/** Files of a model folder or trainer state, shipped through the cache. */
export interface ShippedFiles {
  files: Record<string, Buffer>;
}

/** How a trainer gang sets itself up. */
export interface TrainerSetup {
  model: { config: string | Record<string, unknown>; overrides?: Record<string, unknown>; seed?: number };
  /** HF-layout weights to start from (overrides the random init). */
  checkpoint?: ObjectRef;
  /** Exact trainer state to resume (from `save`). */
  state?: ObjectRef;
  trainer: TrainerOptions;
  /** Cache key rank 0 publishes weights to. */
  weights: string;
  threads?: number;
}

/** A training batch slice as stored in the cache (row-major `rows × cols`). */
export interface TrainSlice {
  rows: number;
  cols: number;
  tokens: Int32Array;
  mask: Uint8Array;
  /** One advantage per row (GRPO); ignored by `sft`. */
  advantages: Float32Array;
  oldLogprobs: Float32Array;
}

/** What `train` returns: the step's metrics, and on rank 0 the publication's stats. */
export interface TrainResult {
  rank: number;
  metrics: TrainMetrics;
  publish?: { kind: string; version: number; bytes: number; changed: number; elements: number; seconds: Record<string, number>; cacheVersion: number };
  seconds: number;
}

/** Writes shipped files into a fresh temporary folder. */
export function unpackFiles(shipped: ShippedFiles, prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  for (const [name, data] of Object.entries(shipped.files)) {
    if (name.includes("/") || name.includes("..")) throw new HearthError(`bad shipped file name '${name}'`);
    writeFileSync(path.join(dir, name), data);
  }
  return dir;
}

/** Reads every file of a folder for shipping. */
export function packFiles(dir: string): ShippedFiles {
  const files: Record<string, Buffer> = {};
  for (const name of readdirSync(dir).sort()) files[name] = readFileSync(path.join(dir, name));
  return { files };
}

/** The service class executors load. */
export class SearchR1Trainer {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  private setupRef?: string;
  private weightsKey = "";
  private mode: "rl" | "sft" | undefined;

  async init(ctx: ExecutorContext): Promise<void> {
    if (ctx.rank === null || ctx.worldSize === null || ctx.rendezvous === null) {
      throw new HearthError("SearchR1Trainer runs as a gang (autoscale: false)");
    }
    this.ctx = ctx;
    this.engine = await TensorEngine.start({ env: { HEARTH_THREADS: "1", GLOO_SOCKET_IFNAME: process.env.GLOO_SOCKET_IFNAME ?? "lo" } });
  }

  private get distributed() {
    const { rank, worldSize, rendezvous } = this.ctx;
    return { rank: rank!, worldSize: worldSize!, initMethod: `tcp://${rendezvous!.host}:${rendezvous!.port}`, backend: "gloo" as const };
  }

  /**
   * Builds the policy (from a shipped checkpoint or a seeded random init),
   * becomes a trainer for `mode` ("sft": no reference, no KL; "rl": GRPO with
   * the frozen reference), optionally restores an exact state, and on rank 0
   * publishes full weights. Idempotent for the same setup object and mode.
   */
  async setup(ref: ObjectRef, mode: "rl" | "sft"): Promise<{ rank: number; params: number; publish?: TrainResult["publish"] }> {
    const key = `${ref.key}@${ref.version}`;
    if (key === this.setupRef && mode === this.mode) return { rank: this.ctx.rank!, params: 0 };
    const s = await this.ctx.objects.get<TrainerSetup>(ref);
    const engine = this.engine!;
    let checkpointDir: string | undefined;
    if (s.checkpoint) checkpointDir = unpackFiles(await this.ctx.objects.get<ShippedFiles>(s.checkpoint), "hearth-ckpt-");
    const init = await engine.initModel({
      config: checkpointDir ?? s.model.config,
      overrides: checkpointDir ? undefined : s.model.overrides,
      checkpoint: checkpointDir,
      seed: s.model.seed ?? 0,
      threads: s.threads ?? 1,
      dtype: "float32",
    });
    const trainer = mode === "sft" ? { ...s.trainer, klCoef: 0 } : s.trainer;
    await engine.trainInit(trainer, this.distributed);
    if (s.state) {
      const dir = unpackFiles(await this.ctx.objects.get<ShippedFiles>(s.state), "hearth-state-");
      await engine.loadState(path.join(dir, "trainer-state.pt"));
      rmSync(dir, { recursive: true, force: true });
    }
    if (checkpointDir) rmSync(checkpointDir, { recursive: true, force: true });
    this.weightsKey = s.weights;
    this.setupRef = key;
    this.mode = mode;
    const publish = this.ctx.rank === 0 && mode === "rl" ? await publishWeights(this.ctx.objects, this.weightsKey, engine) : undefined;
    return { rank: this.ctx.rank!, params: init.params, publish };
  }

  /** One GRPO step on this rank's slice; rank 0 then publishes the new weights. */
  async train(slice: ObjectRef): Promise<TrainResult> {
    const t0 = performance.now();
    const b = await this.ctx.objects.get<TrainSlice>(slice);
    const metrics = await this.engine!.trainStep(b);
    const publish = this.ctx.rank === 0 ? await publishWeights(this.ctx.objects, this.weightsKey, this.engine!) : undefined;
    this.ctx.objects.forget(slice);
    return { rank: this.ctx.rank!, metrics, publish, seconds: (performance.now() - t0) / 1000 };
  }

  /** One supervised step (the bootstrap): maximise the likelihood of masked-in tokens. */
  async sft(slice: ObjectRef): Promise<TrainResult> {
    const t0 = performance.now();
    const b = await this.ctx.objects.get<TrainSlice>(slice);
    // With old logprobs equal to the current ones the ratio is 1 and the clipped
    // policy-gradient loss with advantage 1 is exactly cross-entropy on masked tokens.
    const old = b.rows > 0 ? await this.engine!.logprobs(b.tokens, b.rows, b.cols) : new Float32Array(0);
    const metrics = await this.engine!.trainStep({ ...b, advantages: new Float32Array(b.rows).fill(1), oldLogprobs: old });
    let nll = 0;
    let count = 0;
    for (let i = 0; i < old.length; i++) {
      if (b.mask[i] && i % b.cols !== 0) {
        nll -= old[i]!;
        count++;
      }
    }
    metrics.nll = count > 0 ? nll / count : 0;
    this.ctx.objects.forget(slice);
    return { rank: this.ctx.rank!, metrics, seconds: (performance.now() - t0) / 1000 };
  }

  /** Rank 0: the model in HF layout and the exact trainer state, shipped back through the cache. */
  async save(): Promise<{ rank: number; model?: ObjectRef; state?: ObjectRef }> {
    if (this.ctx.rank !== 0) return { rank: this.ctx.rank! };
    const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-save-"));
    const modelDir = path.join(dir, "model");
    mkdirSync(modelDir);
    await this.engine!.saveCheckpoint(modelDir, "float32");
    const stateDir = path.join(dir, "state");
    mkdirSync(stateDir);
    await this.engine!.saveState(path.join(stateDir, "trainer-state.pt"));
    const model = await this.ctx.objects.put(packFiles(modelDir));
    const state = await this.ctx.objects.put(packFiles(stateDir));
    rmSync(dir, { recursive: true, force: true });
    return { rank: 0, model, state };
  }

  /** sha256 of this rank's bf16 policy. */
  async digest(): Promise<{ rank: number; digest: string }> {
    return { rank: this.ctx.rank!, digest: (await this.engine!.digest()).digest };
  }

  async close(): Promise<void> {
    await this.engine?.close();
  }
}
