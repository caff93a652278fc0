/**
 * The Slurm engine as a provisioner (`connect({ engine: "slurm" })`): the
 * head is a detached `hearth head` of this HEARTH_HOME with no agent of its
 * own (head.ts), and each app gets a SlurmEngine (engine.ts) that submits
 * the jobs whose tasks are its agents. See docs/slurm.md.
 */
import type { Provisioner } from "../../runtime/provisioner.js";
import { hearthHome } from "../local.js";
import { SlurmEngine, type SlurmEngineOptions, type SlurmJobInfo } from "./engine.js";
import { ensureSlurmHead } from "./head.js";

/** `connect({ engine: "slurm", slurm: {...} })`: engine settings plus where the head binds. */
export interface SlurmConnectOptions extends Omit<SlurmEngineOptions, "partition" | "account" | "extraArgs"> {
  /** The head's bind endpoint. Default tcp://127.0.0.1:0: loopback, enough only when the Slurm nodes are this machine. */
  bind?: string;
  /** An agent silent this long is lost (its calls are retried). Default 6 s. */
  agentTimeoutMs?: number;
  /** CURVE key file shared by the head and its agents (created on first use); null turns CURVE off. Default <HEARTH_HOME>/curve-keys.json. */
  curveKeys?: string | null;
}

/** The Slurm engine's part of `connect()`'s options. */
export interface SlurmEngineConnectOptions {
  /** Slurm engine: sbatch --partition. */
  partition?: string;
  /** Slurm engine: sbatch --account. */
  account?: string;
  /** Slurm engine: more sbatch options, e.g. ["--time=04:00:00"]. */
  extraArgs?: string[];
  /** Slurm engine: the rest of its settings (head bind address, agent timeout, polling). */
  slurm?: SlurmConnectOptions;
  /** `local.home` is the HEARTH_HOME the Slurm head's state, keys and job output go under (default HEARTH_HOME or ~/.hearth). */
  local?: { home?: string };
}

/** What the Slurm engine adds to `app.status()`. */
export interface SlurmStatus {
  /** The jobs this driver holds for the app (ids, states, nodes, start latency). */
  jobs: SlurmJobInfo[];
  /** The last error the engine's loop hit (e.g. sbatch refusing a request), if any. */
  lastError: string | null;
}

declare module "../../runtime/provisioner.js" {
  interface ProvisionStatus {
    /** Slurm engine only: the jobs this driver holds for the app. */
    slurm?: SlurmStatus;
  }
}

/** The Slurm provisioner: one head per HEARTH_HOME, one job driver per app. */
export const slurmProvisioner: Provisioner<SlurmEngineConnectOptions> = {
  engine: "slurm",
  async head(opts, given) {
    // A given head (HEARTH_HEAD) is used as is, with the key file the caller names, if any.
    const home = hearthHome(opts.local?.home);
    if (given !== undefined) return { endpoint: given, curveKeys: opts.slurm?.curveKeys ?? null, home };
    const { endpoint, curveKeys } = await ensureSlurmHead({
      home,
      bind: opts.slurm?.bind,
      agentTimeoutMs: opts.slurm?.agentTimeoutMs,
      curveKeys: opts.slurm?.curveKeys,
    });
    return { endpoint, curveKeys, home };
  },
  async attach(client, target, opts) {
    // Job output goes under the head's HEARTH_HOME, next to the keys the jobs read.
    const engine = new SlurmEngine(
      { ...opts.slurm, partition: opts.partition, account: opts.account, extraArgs: opts.extraArgs, curveKeys: target.head.curveKeys },
      target.head.home,
    );
    await engine.start(client, target.app, target.headId);
    return {
      describe: (agents) => ({ slurm: engine.describe(agents) }),
      detach: () => engine.detach(),
      close: () => engine.close(),
    };
  },
};
