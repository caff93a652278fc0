/**
 * Service classes the chaos tests run in real executors: a data-parallel
 * trainer rank whose tensor engine joins the gang's gloo group (so a step is
 * an all-reduce across ranks), a light pool member that answers tagged
 * calls, and one that answers them through its tensor engine.
 */
import { writeFileSync } from "node:fs";
import { TensorEngine } from "../../sdk/tensor/index.js";
import type { ExecutorContext } from "../../sdk/runtime/types.js";
import { gangDistributed } from "../../sdk/runtime/gang.js";

/** The tensor engine's tiny CPU model (as in the engine tests). */
const TINY = { config: "tiny-test", seed: 1 } as const;

/** One trainer rank of a gang: `train` runs GRPO steps, each all-reduced across ranks. */
export class TrainerRank {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
    if (ctx.rank === null || ctx.worldSize === null || ctx.rendezvous === null) throw new Error("TrainerRank runs only as a gang member");
    this.engine = await TensorEngine.start({ env: { GLOO_SOCKET_IFNAME: "lo", HEARTH_THREADS: "1" } });
    await this.engine.initModel(TINY);
    await this.engine.trainInit({ lr: 1e-3, klCoef: 0 }, gangDistributed(ctx, "gloo"));
  }

  /** This rank's executor and engine processes. */
  pids(): { rank: number; executorPid: number; enginePid: number } {
    return { rank: this.ctx.rank!, executorPid: process.pid, enginePid: this.engine!.pid! };
  }

  /**
   * Runs `steps` training steps; after each, writes the count to
   * `${progress}.${rank}` so a test can tell the ranks are mid-training.
   */
  async train(steps: number, progress: string): Promise<number> {
    const rows = 8;
    const cols = 16;
    const rank = this.ctx.rank ?? 0;
    const tokens = Int32Array.from({ length: rows * cols }, (_, i) => (i * 31 + rank) % 256);
    const mask = Uint8Array.from({ length: rows * cols }, (_, i) => (i % cols >= cols / 2 ? 1 : 0));
    const advantages = Float32Array.from({ length: rows }, (_, i) => (i % 2 === 0 ? 1 : -1));
    for (let i = 1; i <= steps; i++) {
      await this.engine!.trainStep({ rows, cols, tokens, mask, advantages });
      writeFileSync(`${progress}.${rank}`, String(i));
    }
    return steps;
  }

  async close(): Promise<void> {
    await this.engine?.close();
  }
}

/** A light pool member: `tagged` waits, then says which call it answered and where (no engine: cheap to start). */
export class Tagger {
  private ctx!: ExecutorContext;
  private readonly ran: number[] = [];

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** The tags this executor ran, in order (a tag twice: that call ran twice here). */
  executions(): { executorId: string; tags: number[] } {
    return { executorId: this.ctx.executorId, tags: this.ran };
  }

  /** Waits `ms`, then returns the tag with where it ran. */
  async tagged(tag: number, ms: number): Promise<{ tag: number; executorId: string; pid: number }> {
    this.ran.push(tag);
    await new Promise((r) => setTimeout(r, ms));
    return { tag, executorId: this.ctx.executorId, pid: process.pid };
  }
}

/** A pool member with a warm tensor engine; `tagged` answers through it (a ping) and says where it ran. */
export class EngineWorker {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  runs = 0;

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
    this.engine = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  }

  /** This executor's and its engine's process ids. */
  pids(): { executorId: string; executorPid: number; enginePid: number } {
    return { executorId: this.ctx.executorId, executorPid: process.pid, enginePid: this.engine!.pid! };
  }

  /** Waits `ms`, asks the engine for a ping, and returns the tag with where it ran. */
  async tagged(tag: number, ms: number): Promise<{ tag: number; executorId: string; enginePid: number }> {
    this.runs++;
    await new Promise((r) => setTimeout(r, ms));
    const info = await this.engine!.ping({ timeoutMs: 10_000 });
    return { tag, executorId: this.ctx.executorId, enginePid: info.pid };
  }

  async close(): Promise<void> {
    await this.engine?.close();
  }
}
