/**
 * Service classes the Slurm tests run in executors started by Slurm jobs.
 */
import os from "node:os";
import { TensorEngine } from "../../sdk/tensor/index.js";
import type { TrainMetrics } from "../../sdk/tensor/index.js";
import type { ExecutorContext } from "../../sdk/runtime/types.js";
import { gangDistributed } from "../../sdk/runtime/gang.js";

/** The tensor engine's tiny CPU model (as in the engine tests). */
const TINY = { config: "tiny-test", seed: 1 } as const;

/** Where this executor runs, as Slurm and hearth see it. */
export interface Placement {
  rank: number | null;
  worldSize: number | null;
  node: string | null;
  jobId: string | null;
  cudaVisibleDevices: string | null;
  agentId: string;
  rendezvous: { host: string; port: number } | null;
  /** The executor's non-loopback IPv4 addresses: its network namespace's, when nodes run in namespaces. */
  addrs: string[];
  /** HEARTH_HOME as the job received it (where the cluster's keys are found on the node). */
  hearthHome: string | null;
}

/**
 * A data-parallel trainer rank: its tensor engine joins the gang's gloo
 * process group at the rendezvous hearth gives it; `step` runs one GRPO step,
 * whose token and row counts are all-reduced across ranks by the engine.
 */
export class Reducer {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
    if (ctx.rank === null || ctx.worldSize === null || ctx.rendezvous === null) throw new Error("Reducer runs only as a gang member");
    this.engine = await TensorEngine.start({ env: { GLOO_SOCKET_IFNAME: "lo", HEARTH_THREADS: "1" } });
    await this.engine.initModel(TINY);
    await this.engine.trainInit({ lr: 1e-3, klCoef: 0 }, gangDistributed(ctx, "gloo"));
  }

  placement(): Placement {
    return placementOf(this.ctx);
  }

  /**
   * One training step on `rows` rows of which `trained` tokens per row are
   * generated (masked in); returns the engine's metrics, whose `tokens` and
   * `rows` are sums over every rank (an all-reduce in the engine).
   */
  async step(rows: number, trained: number): Promise<TrainMetrics> {
    const cols = 8;
    const tokens = Int32Array.from({ length: rows * cols }, (_, i) => (i * 31 + (this.ctx.rank ?? 0)) % 256);
    const mask = Uint8Array.from({ length: rows * cols }, (_, i) => (i % cols >= cols - trained ? 1 : 0));
    return this.engine!.trainStep({
      rows,
      cols,
      tokens,
      mask,
      advantages: Float32Array.from({ length: rows }, (_, i) => (i % 2 === 0 ? 1 : -1)),
      oldLogprobs: new Float32Array(rows * cols).fill(-5.5),
    });
  }

  async close(): Promise<void> {
    await this.engine?.close();
  }
}

/** A small gang or pool member that says where it runs and can sleep. */
export class Where {
  private ctx!: ExecutorContext;

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
  }

  placement(): Placement {
    return placementOf(this.ctx);
  }

  async sleep(ms: number): Promise<Placement & { executorId: string }> {
    await new Promise((r) => setTimeout(r, ms));
    return { ...placementOf(this.ctx), executorId: this.ctx.executorId };
  }
}

function placementOf(ctx: ExecutorContext): Placement {
  return {
    rank: ctx.rank,
    worldSize: ctx.worldSize,
    node: process.env.SLURMD_NODENAME ?? null,
    jobId: process.env.SLURM_JOB_ID ?? null,
    cudaVisibleDevices: process.env.CUDA_VISIBLE_DEVICES ?? null,
    agentId: ctx.agentId,
    rendezvous: ctx.rendezvous,
    addrs: Object.values(os.networkInterfaces())
      .flatMap((list) => list ?? [])
      .filter((a) => a.family === "IPv4" && !a.internal)
      .map((a) => a.address),
    hearthHome: process.env.HEARTH_HOME ?? null,
  };
}
