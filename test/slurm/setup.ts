/**
 * Shared setup of the Slurm tests: a real two-node Slurm (harness.ts), a
 * throw-away HEARTH_HOME, and an app connected with `engine: "slurm"` whose
 * head declares agents lost after 2 s. By default every node is this
 * machine's loopback; `{ netns: true }` puts each node in its own network
 * namespace (netns.ts) and binds the head on the bridge address the nodes
 * reach, so head, agents and executors talk across distinct addresses.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "../../sdk/connect.js";
import type { App, AppStatus } from "../../sdk/runtime/app.js";
import { stopSlurmHead, type SlurmConnectOptions } from "../../sdk/engines/slurm/index.js";
import { startSlurm, type SlurmCluster, type SlurmNodeSpec } from "./harness.js";
import { createHostNetwork, type HostNetwork } from "./netns.js";

/** The compiled Slurm test services module. */
export const SERVICES = path.join(path.dirname(fileURLToPath(import.meta.url)), "services.js");

/** A Slurm cluster plus a hearth home whose head is stopped by `stop()`. */
export interface SlurmWorld {
  slurm: SlurmCluster;
  home: string;
  /** The nodes' namespaces (netns worlds only). */
  net?: HostNetwork;
  /** Environment of Slurm commands and jobs: SLURM_CONF and this world's HEARTH_HOME. */
  env: NodeJS.ProcessEnv;
  /** What the head binds: the bridge address in a netns world, else undefined (loopback). */
  bind?: string;
  /** Connects an app with the Slurm engine (`extra` adds connect and engine options). */
  connect(name: string, extra?: { keepAliveMs?: number; slurm?: SlurmConnectOptions }): Promise<App>;
  /** Closes the apps, stops the head, then Slurm: no process left behind. */
  stop(): Promise<void>;
}

/** Starts Slurm (`nodes`, default n1 and n2; `munge`: Slurm's own auth on) and prepares a hearth home; `netns` runs each node in a network namespace of its own. */
export async function startWorld(opts: { netns?: boolean; nodes?: SlurmNodeSpec[]; munge?: boolean } = {}): Promise<SlurmWorld> {
  const net = opts.netns ? createHostNetwork((opts.nodes ?? [{ name: "n1" }, { name: "n2" }]).map((n) => n.name)) : undefined;
  let slurm: SlurmCluster;
  try {
    slurm = await startSlurm({ network: net, nodes: opts.nodes, munge: opts.munge });
  } catch (err) {
    net?.close();
    throw err;
  }
  const home = mkdtempSync(path.join(os.tmpdir(), "hearth-slurm-home-"));
  // Jobs inherit the submitting environment (sbatch exports it): the cluster's
  // HEARTH_HOME travels with them, so whatever it holds (keys, secrets) is
  // found on the nodes at the same path, as on a shared home file system.
  const env = { ...slurm.env, HEARTH_HOME: home };
  const bind = net ? `tcp://${net.gateway}:0` : undefined;
  const apps: App[] = [];
  return {
    slurm,
    home,
    net,
    env,
    bind,
    async connect(name, extra = {}) {
      const app = await connect({
        name,
        engine: "slurm",
        local: { home },
        keepAliveMs: extra.keepAliveMs,
        slurm: { agentTimeoutMs: 2000, env, bind, pollMs: 250, ...extra.slurm },
      });
      apps.push(app);
      return app;
    },
    async stop() {
      try {
        for (const app of apps) await app.close().catch(() => undefined);
        await stopSlurmHead(home);
      } finally {
        try {
          await slurm.stop();
        } finally {
          net?.close();
          rmSync(home, { recursive: true, force: true });
        }
      }
    },
  };
}

/** Polls until `probe` returns a value (not undefined). */
export async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Where each agent of a status runs: the node of the Slurm job that started it (single-node jobs). */
export async function agentNodes(world: SlurmWorld, st: AppStatus): Promise<Map<string, string>> {
  const jobs = await world.slurm.jobs();
  const nodes = new Map<string, string>();
  for (const a of st.agents) {
    const job = jobs.find((j) => j.id === a.labels["hearth.job"]);
    if (job && /^n\d$/.test(job.nodes)) nodes.set(a.id, job.nodes);
  }
  return nodes;
}

/** Calls the head retried on another executor (its status). */
export function retriedCalls(st: AppStatus): number {
  return (st.head as unknown as { calls: { retried: number } }).calls.retried;
}
