/**
 * The rollout side of `bench weights`: an executor with a real tensor engine
 * holding a bf16 model of the bench's shape, which brings itself to the
 * latest weights publication through the real path (`applyPublications`:
 * an incremental get through the node cache, then the engine's apply) and
 * says how long the fetch and the apply took, and what it holds.
 */
import { applyPublications } from "../sdk/searchr1/weights.js";
import { TensorEngine } from "../sdk/tensor/index.js";
import type { ExecutorContext } from "../sdk/runtime/types.js";

/**
 * The engines' heartbeat deadline. The default (3 s) killed a healthy engine
 * here: while a 1 GB base was decoded and piped on a 2-core machine at load 7,
 * the executor read no heartbeat for 5 s (bench run of 2026-12, 0.5b shape).
 */
export const HANG_TIMEOUT_MS = 120_000;

/** Where one rollout executor runs. */
export interface WeightsMemberInfo {
  executorId: string;
  agentId: string;
  pid: number;
  enginePid: number;
}

/** One sync: the version reached and what it cost on this executor. */
export interface WeightsSync {
  executorId: string;
  agentId: string;
  version: number;
  /** From the start of the get to the first engine apply (node cache + head). */
  fetchMs: number;
  /** Engine apply of every publication fetched (pipe + decode + write). */
  applyMs: number;
  totalMs: number;
  /** Bytes this executor's object cache received in this sync. */
  bytes: number;
  /** Kinds of what was applied, in order ("full", "patch"). */
  applied: string[];
}

/** A rollout executor for the weights bench. */
export class WeightsRollout {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** Starts the engine with a random model of `preset` in bf16 (a seed other than the publisher's). */
  async setup(preset: string, threads: number): Promise<WeightsMemberInfo> {
    this.engine ??= await TensorEngine.start({ env: { HEARTH_THREADS: String(threads) }, hangTimeoutMs: HANG_TIMEOUT_MS });
    await this.engine.initModel({ config: preset, seed: 7, dtype: "bfloat16", device: "cpu", threads }, { timeoutMs: 600_000 });
    return { executorId: this.ctx.executorId, agentId: this.ctx.agentId, pid: process.pid, enginePid: this.engine.pid ?? -1 };
  }

  /** Brings the engine to the latest publication of `key`. */
  async sync(key: string): Promise<WeightsSync> {
    const engine = this.need();
    const received = this.ctx.objects.stats.bytesReceived;
    const applied: string[] = [];
    let applyMs = 0;
    let firstApply: number | undefined;
    let lastVersion = -1;
    // The real path, with the engine's apply timed: everything before the first apply is the fetch.
    const timed = {
      apply: async (blobs: readonly Uint8Array[]) => {
        const t = performance.now();
        firstApply ??= t;
        try {
          const r = await engine.apply(blobs, { timeoutMs: 600_000 });
          // A base arrives as several shards (one request each): list each publication once.
          for (const a of r.applied) {
            if (a.version !== lastVersion) applied.push(a.kind);
            lastVersion = a.version;
          }
          return r;
        } finally {
          applyMs += performance.now() - t;
        }
      },
    } as unknown as TensorEngine;
    const t0 = performance.now();
    const record = await applyPublications(this.ctx.objects, key, timed);
    const t1 = performance.now();
    return {
      executorId: this.ctx.executorId,
      agentId: this.ctx.agentId,
      version: record.version,
      fetchMs: (firstApply ?? t1) - t0,
      applyMs,
      totalMs: t1 - t0,
      bytes: this.ctx.objects.stats.bytesReceived - received,
      applied,
    };
  }

  /** sha256 of the engine's bf16 weights (every tensor, sorted by name). */
  async digest(): Promise<{ digest: string; version: number }> {
    const d = await this.need().digest({ timeoutMs: 600_000 });
    return { digest: d.digest, version: d.version };
  }

  async close(): Promise<void> {
    await this.engine?.close();
  }

  private need(): TensorEngine {
    if (!this.engine) throw new Error("call setup first");
    return this.engine;
  }
}
