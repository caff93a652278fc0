/**
 * `connect()`: the one place that knows the engines. It picks a provisioner
 * by `engine` ("local", the default, or "slurm", or one registered with
 * `registerProvisioner`) and opens the app through the engine-independent
 * runtime (`App.open`). The runtime, the notebook helpers and the wire layer
 * import no engine (linted: eslint.config.js).
 */
import { App, type AppOptions } from "./runtime/app.js";
import type { Provisioner } from "./runtime/provisioner.js";
import { ServiceConfigError } from "./errors/index.js";
import { localProvisioner, type LocalEngineOptions } from "./engines/local.js";
import { slurmProvisioner, type SlurmEngineConnectOptions } from "./engines/slurm/index.js";

/** Options of `connect()`: the app's own, plus each engine's (`local`, `partition`, `account`, `extraArgs`, `slurm`). */
export interface ConnectOptions extends AppOptions, LocalEngineOptions, Omit<SlurmEngineConnectOptions, "local"> {
  /**
   * Where agents come from. "local" (default): the embedded local agent, or
   * whatever agents joined the given head. "slurm": every service's agents
   * are Slurm jobs this driver submits (a pool grows by jobs, a gang is one
   * job); the head runs on this machine with no agent (see docs/slurm.md).
   * Any other name: a provisioner registered with `registerProvisioner`.
   */
  engine?: "local" | "slurm" | (string & {});
}

const provisioners = new Map<string, Provisioner<any>>([
  [localProvisioner.engine, localProvisioner],
  [slurmProvisioner.engine, slurmProvisioner],
]);

/**
 * Makes `connect({ engine: p.engine })` use `p`. The engine name must be new:
 * replacing "local" or "slurm" (or another registered one) is refused.
 */
export function registerProvisioner(p: Provisioner<any>): void {
  if (!p || typeof p.engine !== "string" || p.engine === "" || typeof p.head !== "function") {
    throw new ServiceConfigError("registerProvisioner() needs { engine: <name>, head(opts, given), attach?(client, target, opts) }");
  }
  if (provisioners.has(p.engine)) throw new ServiceConfigError(`an engine named '${p.engine}' is already registered; give the provisioner another name`);
  provisioners.set(p.engine, p);
}

/** The provisioner `connect({ engine })` uses; a clear error naming the known engines otherwise. */
export function findProvisioner(engine: string | undefined): Provisioner<any> {
  const name = engine ?? "local";
  const p = provisioners.get(name);
  if (!p) throw new ServiceConfigError(`unknown engine '${name}': use one of ${[...provisioners.keys()].map((k) => `"${k}"`).join(", ")}, or registerProvisioner() first`);
  return p;
}

/** Connects to a head (the engine's own, or `head`/HEARTH_HEAD) and opens the app `opts.name`. */
export async function connect(opts: ConnectOptions): Promise<App> {
  // App.open checks the name before the provisioner starts anything.
  return App.open(opts, findProvisioner(opts?.engine));
}

/** What each agent of a cluster has (`capacity()`): totals and what is free now; gpus as counts. */
export interface ClusterCapacity {
  agents: Array<{ id: string; total: { cpu: number; mem: number; gpus: number }; free: { cpu: number; mem: number; gpus: number } }>;
}

/**
 * What the agents of the head `connect(opts)` would use have, asked with the
 * app's credential but without opening the app (nothing is created on the
 * head): a driver checks its services can fit before it declares anything.
 */
export async function capacity(opts: ConnectOptions): Promise<ClusterCapacity> {
  return App.capacity(opts, findProvisioner(opts?.engine));
}
