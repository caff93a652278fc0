/**
 * The provisioner interface: where an app's head comes from and who supplies
 * its agents. The runtime (App, handles, head client) knows only this
 * interface; the engines (sdk/engines/local.ts: the embedded default,
 * sdk/engines/slurm/: agents as Slurm jobs) implement it, and the top of the
 * SDK (sdk/connect.ts) picks one by `connect({ engine })`. So the runtime
 * imports no engine, and an engine can be added without touching it (the
 * layering is linted: eslint.config.js).
 */
import type { HeadClient } from "./head-client.js";

/** The head an app talks to, as a provisioner found or started it. */
export interface ProvisionedHead {
  /** tcp://host:port. */
  endpoint: string;
  /** The CURVE key file clients of this head need, or null when it runs without CURVE. */
  curveKeys: string | null;
  /** The HEARTH_HOME this head's state and credentials live under (the driver's clients and the engine's jobs find them there). */
  home: string;
}

/** An agent as the head's status document shows it (what a provisioner may match its agents by). */
export interface ProvisionAgent {
  id: string;
  executors: number;
  labels?: Record<string, string>;
}

/**
 * What provisioners add to `app.status()`, by key. Empty here: an engine
 * declares its key by augmenting this interface (TypeScript declaration
 * merging), e.g. the Slurm engine adds `slurm?: { jobs, lastError }`.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- augmented by the engines
export interface ProvisionStatus {}

/**
 * A provisioner's per-app part, for engines that supply agents per service
 * (Slurm: a job per pool executor, one job per gang). While an app has one,
 * its services are declared elastic (the head waits for agents to arrive
 * instead of refusing for capacity) and `service()` has no default ready
 * deadline, since jobs may queue for hours.
 */
export interface AppProvision {
  /** Extras for `app.status()`; `agents` are the head's, from the same status. */
  describe(agents: ProvisionAgent[]): ProvisionStatus;
  /** Stops supplying agents; what runs keeps running (a disconnect: the app stays warm). */
  detach(): Promise<void>;
  /** Stops supplying agents and releases every one it started (the app is closed). Idempotent. */
  close(): Promise<void>;
}

/** The app a provisioner attaches to. */
export interface ProvisionTarget {
  /** The app's name. */
  app: string;
  /** The head's instance id (from its hello), so a reattaching driver recognises what it started before. */
  headId: string;
  /** The head as `head()` returned it. */
  head: ProvisionedHead;
}

/**
 * Where heads and agents come from, for the connect options `O` it reads
 * (its own part of `connect()`'s options).
 */
export interface Provisioner<O extends object = object> {
  /** The name `connect({ engine })` selects it by. */
  readonly engine: string;
  /**
   * The head for an app: with `given` (the `head` option or HEARTH_HEAD) that
   * endpoint, with the keys this engine uses for it; without, one this
   * engine finds or starts.
   */
  head(opts: O, given: string | undefined): Promise<ProvisionedHead>;
  /** Starts supplying the app's agents, when this engine does so per service; absent when agents are whatever joined the head. */
  attach?(client: HeadClient, target: ProvisionTarget, opts: O): Promise<AppProvision>;
}
