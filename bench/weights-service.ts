/**
 * The rollout side of `bench weights`: an executor with a real tensor engine
 * holding a bf16 model of the bench's shape, which brings itself to the
 * latest weights publication through the real path (`applyPublications`:
 * an incremental get through the node cache, then the engine's apply) and
 * says how long the fetch and the apply took, and what it holds.
 */
import { applyPublications, type PublicationRecord, type SyncResult } from "../sdk/rl/services/weights.js";
import { TensorEngine, type PublicationSource } from "../sdk/tensor/index.js";
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
  /** Bytes that crossed a socket to this executor in this sync (a node's files are read in place). */
  bytes: number;
  /** Bytes of the blobs applied. */
  appliedBytes: number;
  /** Wall-clock time (ms since the epoch) the first blob was applied (null: nothing to apply). */
  firstAppliedAt: number | null;
  /** Wall-clock time (ms since the epoch) the sync ended: the bench lines it up with the publication's commit. */
  doneAt: number;
  /** Kinds of what was applied, in order ("full", "patch"). */
  applied: string[];
}

/** A rollout executor for the weights bench. */
export class WeightsRollout {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  private held: PublicationRecord = { version: 0 };

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** Starts the engine with a random model of `config` (a preset, or synthetic weights) in bf16 (a seed other than the publisher's). */
  async setup(config: string | Record<string, unknown>, threads: number): Promise<WeightsMemberInfo> {
    this.engine ??= await TensorEngine.start({ env: { HEARTH_THREADS: String(threads) }, hangTimeoutMs: HANG_TIMEOUT_MS });
    await this.engine.initModel({ config, seed: 7, dtype: "bfloat16", device: "cpu", threads }, { timeoutMs: 600_000 });
    this.held = { version: 0 };
    return { executorId: this.ctx.executorId, agentId: this.ctx.agentId, pid: process.pid, enginePid: this.engine.pid ?? -1 };
  }

  /** Brings the engine to the latest publication of `key` (from the version it holds). */
  async sync(key: string): Promise<WeightsSync> {
    const engine = this.need();
    const received = this.ctx.objects.stats.bytesReceived;
    let applyMs = 0;
    let firstApply: number | undefined;
    let firstAppliedAt: number | null = null;
    // The real path, with the engine's applies timed: everything before the first apply is the fetch.
    const timed = <A extends unknown[], R>(f: (...a: A) => Promise<R>) => async (...a: A): Promise<R> => {
      const t = performance.now();
      firstApply ??= t;
      try {
        return await f(...a);
      } finally {
        applyMs += performance.now() - t;
        firstAppliedAt ??= Date.now();
      }
    };
    const wrapped = {
      applySources: timed((sources: readonly PublicationSource[]) => engine.applySources(sources, { timeoutMs: 600_000 })),
    } as unknown as TensorEngine;
    const t0 = performance.now();
    let r: SyncResult;
    try {
      r = await applyPublications(this.ctx.objects, key, wrapped, this.held);
      this.held = { version: r.version, cache: r.cache };
    } catch (err) {
      this.held = { version: 0 };
      throw err;
    }
    const t1 = performance.now();
    return {
      executorId: this.ctx.executorId,
      agentId: this.ctx.agentId,
      version: r.version,
      fetchMs: (firstApply ?? t1) - t0,
      applyMs,
      totalMs: t1 - t0,
      firstAppliedAt,
      doneAt: Date.now(),
      bytes: this.ctx.objects.stats.bytesReceived - received,
      appliedBytes: r.bytes,
      applied: r.applied,
    };
  }

  /** What this executor's node cache says of itself: its fetch counters and the copies it installed lately. */
  async nodeStat(): Promise<Record<string, unknown>> {
    return this.ctx.objects.stat();
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
