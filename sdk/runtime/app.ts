/**
 * An app: a named group of services owned by a driver (a notebook kernel or a
 * CLI). Connecting again with the same name, from any process, finds the same
 * services with their executors still warm. Where its head and agents come
 * from is a Provisioner's business (provisioner.ts); `connect()` in
 * sdk/connect.ts picks the engine, this file knows none.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { existsSync } from "node:fs";
import { ServiceConfigError } from "../errors/index.js";
import { GangHandle, PoolHandle, type ServiceInfo } from "./handles.js";
import { HeadClient } from "./head-client.js";
import { parseResreq } from "./resreq.js";
import { checkServiceModule, isTypeScriptModule } from "./service-module.js";
import { ObjectCache } from "../cache/object-cache.js";
import { VersionConflictError } from "../errors/index.js";
import { findProjectRoot, packProject } from "./project.js";
import { loadCurveKeys } from "../wire/curve.js";
import type { AppProvision, ProvisionStatus, Provisioner } from "./provisioner.js";
import { SECRET_FILE_ENV, type Credential } from "../wire/auth.js";
import { PENDING_EVERY_MS, printPending, watchPending, type PendingReport } from "./pending-watch.js";

/** Where a service class lives: a module (path, file URL or package specifier) and its export. */
export interface ServiceRef {
  module: string | URL;
  export: string;
}

/** Options shared by pools and gangs. */
export interface ServiceOptions {
  /** Name in the app; defaults to the export name. */
  name?: string;
  /** Per-executor resources, e.g. "cpu=8,mem=64g,gpu=1". Default "cpu=1". */
  resreq?: string;
  /** Executors started at once (a pool's floor; a gang's exact size). Default 1. */
  warmup?: number;
  /** true (default): a pool that grows and shrinks; false: a gang of exactly `warmup`. */
  autoscale?: boolean;
  /** A pool's ceiling. Default: as many as resources allow. */
  max?: number;
  /** Idle pool executors beyond warmup stop after this many ms. Default 60 000. */
  idleTimeout?: number;
  /** Calls one executor runs at once. Default 1. */
  concurrency?: number;
  /** Replace an existing service of the same name but a different definition. */
  replace?: boolean;
  /** Resolve as soon as the head accepted the declaration, without waiting for warm executors. */
  wait?: boolean;
  /**
   * How long `service()` waits for the warm executors (a gang: all members)
   * before failing with TimeoutError; the service stays declared. Default
   * 10 min; none when the provisioner supplies agents per service (Slurm: jobs can queue for hours).
   */
  readyTimeoutMs?: number;
  /**
   * Each executor's deadline to become ready (module load, project setup,
   * `init`); past it the executor is killed and the service fails with
   * ServiceStartError. Default 10 min.
   */
  initTimeoutMs?: number;
  /**
   * Default deadline of every call (ms); a call past it fails with
   * TimeoutError and its executor is killed and replaced. Default: none,
   * since calls such as a training step may legitimately run long; a call
   * can still set its own with `handle.withOptions({ timeoutMs })`.
   */
  callTimeoutMs?: number;
  /** Calls that may wait for a free executor at most; more fail with QueueFullError. Default 10 000. */
  maxQueued?: number;
  /**
   * Told, while `service()` waits, that executors could not all be placed and
   * why (service, placed of wanted, each agent's free resources): at once,
   * then every `pendingEveryMs`. Default: one line on stderr.
   */
  onPending?: (p: PendingReport) => void;
  /** How often a pending service is reported again. Default 20 s. */
  pendingEveryMs?: number;
  /**
   * Its executors may open this app as a driver: their agent hands each one
   * the app's token (HEARTH_APP_TOKEN, this app only, never the cluster
   * secret). For a service that drives its siblings, such as a training
   * loop that outlives its client (searchr1/loop-service.ts). Default false.
   */
  drivesApp?: boolean;
}

/** Default of ServiceOptions.readyTimeoutMs. */
export const READY_TIMEOUT_MS = 10 * 60_000;

/**
 * The engine-independent options of `connect()` (sdk/connect.ts adds each
 * engine's own: `engine`, `local`, `slurm`, ...).
 */
export interface AppOptions {
  /** The app's name; the same name reattaches to the same warm services. */
  name: string;
  /** Head endpoint (tcp://host:port). Default: HEARTH_HEAD, else the engine's own head (the embedded local one by default). */
  head?: string;
  /** How long the app stays warm after its last driver is gone. Default: the head's (30 min). */
  keepAliveMs?: number;
  /** How long to wait for the head to answer. Default 10 s. */
  timeoutMs?: number;
  /**
   * Ship this project (a folder with a package.json, or a path inside one;
   * `true` = the one around the current directory) to agents through the
   * object cache, for agents that cannot read the driver's files (other
   * nodes). Service modules inside it are imported from the agent's unpacked
   * copy, with dependencies installed from its lockfile. Default: off, agents
   * import modules by the driver's absolute path.
   */
  project?: string | boolean;
  /**
   * The credential to prove to the head. Default: HEARTH_APP_TOKEN (an app
   * token from `hearth token APP`), else this app's key derived from the
   * cluster secret under the provisioner's HEARTH_HOME.
   */
  credential?: Credential;
}

/** A connected app. Create with `connect()` (sdk/connect.ts), or `App.open()` with a provisioner. */
export class App {
  private closed = false;
  /** The app's object cache: put/get/update/patch/delete, shared with its executors. */
  readonly objects: ObjectCache;

  private constructor(
    private readonly client: HeadClient,
    /** The app's name. */
    readonly name: string,
    /** True when this app already existed on the head (a reattach). */
    readonly reattached: boolean,
    private knownServices: ServiceInfo[],
    private readonly projectRoot: string | undefined,
    /** The provisioner's part for this app when it supplies agents per service (Slurm), else undefined. */
    private readonly provision: AppProvision | undefined,
  ) {
    this.objects = new ObjectCache(client);
  }

  /** Opens the app `opts.name` on the head `provisioner` finds or starts (or `opts.head`/HEARTH_HEAD), letting it supply agents. */
  static async open<O extends object>(opts: AppOptions & O, provisioner: Provisioner<O>): Promise<App> {
    if (!opts || typeof opts.name !== "string" || opts.name === "") {
      throw new ServiceConfigError('connect() needs a name: connect({ name: "my-app" })');
    }
    const head = await provisioner.head(opts, opts.head ?? process.env.HEARTH_HEAD);
    const curve = head.curveKeys ? loadCurveKeys(head.curveKeys) : undefined;
    const { client, hello } = await HeadClient.open(head.endpoint, { app: opts.name, keepAliveMs: opts.keepAliveMs }, { timeoutMs: opts.timeoutMs, curve, credential: opts.credential, home: process.env[SECRET_FILE_ENV] ? undefined : head.home }); // a kernel or job handed HEARTH_SECRET_FILE uses that file
    const project = opts.project === true ? findProjectRoot(process.cwd()) : typeof opts.project === "string" ? findProjectRoot(opts.project) : undefined;
    let provision: AppProvision | undefined;
    try {
      provision = await provisioner.attach?.(client, { app: opts.name, headId: String(hello.headId), head }, opts);
    } catch (err) {
      client.close();
      throw err;
    }
    return new App(client, opts.name, hello.reattached as boolean, hello.services as ServiceInfo[], project, provision);
  }

  /** The agents' resources of the head `open(opts, provisioner)` would use, without opening the app (the head's `capacity`). */
  static async capacity<O extends object>(opts: AppOptions & O, provisioner: Provisioner<O>): Promise<{ agents: Array<{ id: string; total: { cpu: number; mem: number; gpus: number }; free: { cpu: number; mem: number; gpus: number } }> }> {
    if (!opts || typeof opts.name !== "string" || opts.name === "") throw new ServiceConfigError('capacity() needs the app\'s name: capacity({ name: "my-app" })');
    const head = await provisioner.head(opts, opts.head ?? process.env.HEARTH_HEAD);
    const curve = head.curveKeys ? loadCurveKeys(head.curveKeys) : undefined;
    return HeadClient.ask(head.endpoint, opts.name, "capacity", {}, { timeoutMs: opts.timeoutMs, curve, credential: opts.credential, home: process.env[SECRET_FILE_ENV] ? undefined : head.home });
  }

  /**
   * A secret derived from this driver's credential for `purpose` (hex): every
   * driver of the app derives the same one, its executors cannot (e.g. the
   * key of a run's agent endpoint).
   */
  derivedKey(purpose: string): string {
    return this.client.deriveKey(purpose);
  }

  /** The head endpoint this app talks to. */
  get endpoint(): string {
    return this.client.endpoint;
  }

  /** Services that existed when this app was opened (reattach), as the head described them. */
  get services(): readonly ServiceInfo[] {
    return this.knownServices;
  }

  /**
   * Declares a service (or finds the same one, still warm) and resolves when
   * its warmup executors are ready. `autoscale: false` makes a gang.
   */
  service<S = any>(ref: ServiceRef | string, opts: ServiceOptions & { autoscale: false }): Promise<GangHandle<S>>;
  service<S = any>(ref: ServiceRef | string, opts?: ServiceOptions & { autoscale?: true }): Promise<PoolHandle<S>>;
  async service<S = any>(ref: ServiceRef | string, opts: ServiceOptions = {}): Promise<PoolHandle<S> | GangHandle<S>> {
    const { module, exportName } = resolveRef(ref);
    parseResreq(opts.resreq); // clear errors before anything is sent
    if (opts.pendingEveryMs !== undefined && !(opts.pendingEveryMs > 0)) throw new ServiceConfigError(`pendingEveryMs must be a positive number of milliseconds; got ${opts.pendingEveryMs}`);
    // A TypeScript service is type-checked here, so its errors name file and line before any executor starts.
    if (isTypeScriptModule(module) && !module.startsWith("data:")) checkServiceModule(module.startsWith("file:") ? fileURLToPath(module) : module);
    const shipped = await this.shipProject(module);
    const spec = {
      name: opts.name ?? exportName,
      module: shipped?.module ?? module,
      project: shipped?.project,
      export: exportName,
      resreq: opts.resreq ?? "",
      warmup: opts.warmup,
      autoscale: opts.autoscale,
      max: opts.max,
      idleTimeoutMs: opts.idleTimeout,
      concurrency: opts.concurrency,
      callTimeoutMs: opts.callTimeoutMs,
      initTimeoutMs: opts.initTimeoutMs,
      maxQueued: opts.maxQueued,
      elastic: this.provision !== undefined ? true : undefined,
      drivesApp: opts.drivesApp === true ? true : undefined,
    };
    let info: ServiceInfo = await this.client.control("service", { spec, replace: opts.replace === true });
    if (opts.wait !== false) {
      const readyTimeoutMs = opts.readyTimeoutMs ?? (this.provision !== undefined ? undefined : READY_TIMEOUT_MS);
      if (readyTimeoutMs !== undefined && !(readyTimeoutMs > 0)) throw new ServiceConfigError(`readyTimeoutMs must be a positive number of milliseconds; got ${readyTimeoutMs}`);
      // The head answers TimeoutError at the deadline (describing where the start stands); the local timer is a backstop.
      const everyMs = opts.pendingEveryMs ?? PENDING_EVERY_MS;
      const ready = this.client.control("ready", { service: info.name, timeoutMs: readyTimeoutMs }, readyTimeoutMs === undefined ? null : readyTimeoutMs + 5_000) as Promise<ServiceInfo>;
      const id = info.id;
      info = await watchPending(ready, () => this.pendingOf(id), opts.onPending ?? printPending, everyMs);
    }
    return info.kind === "gang" ? new GangHandle<S>(this.client, info) : new PoolHandle<S>(this.client, info);
  }

  /** Packs the project around `module` into the cache (once per content hash) when project shipping is on. */
  private async shipProject(module: string): Promise<{ module: string; project: { hash: string; key: string } } | undefined> {
    const root = this.projectRoot;
    if (!root || !path.isAbsolute(module) || !module.startsWith(`${root}${path.sep}`)) return undefined;
    const packed = packProject(root);
    const key = `_projects/${packed.hash}`;
    try {
      await this.objects.put(packed.archive, { key, pin: true });
    } catch (err) {
      if (!(err instanceof VersionConflictError)) throw err; // already shipped: same content, same hash
    }
    return { module: path.relative(root, module).split(path.sep).join("/"), project: { hash: packed.hash, key } };
  }

  /** Why service `id` waits for placement (null when all its executors are placed). */
  private async pendingOf(id: string): Promise<PendingReport | null> {
    const status: AppStatus = await this.client.control("status", { app: this.name });
    return status.apps.flatMap((a) => a.services).find((s) => s.id === id)?.pending ?? null;
  }

  /** Executors (starting, idle, busy), resources, queue depths: what the head knows about this app. */
  async status(): Promise<AppStatus> {
    const status: AppStatus = await this.client.control("status", { app: this.name });
    if (this.provision) Object.assign(status, this.provision.describe(status.agents));
    return status;
  }

  /** Stops one service by name. */
  async stopService(name: string): Promise<void> {
    await this.client.control("stop-service", { service: name });
  }

  /** Leaves the app running and warm (for its keep-alive period) and closes this connection. Idempotent. */
  async disconnect(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.provision?.detach();
      await this.client.control("detach", {}, 5000);
    } finally {
      this.client.close();
    }
  }

  /** Stops every service of the app, releasing its executors, and closes the connection. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.provision?.detach();
      await this.client.control("close-app", {}, 30_000);
      await this.provision?.close();
    } finally {
      this.client.close();
    }
  }

  /** Replies that arrived twice for one call (should always be 0). */
  get duplicateReplies(): number {
    return this.client.duplicateReplies;
  }
}

/** The status document returned by `app.status()`, plus what the app's provisioner adds (ProvisionStatus: `slurm` for the Slurm engine). */
export interface AppStatus extends ProvisionStatus {
  /** `log`: the head's log lines written and dropped (a full log disk or a closed stderr drops lines, never the head). */
  head: { id: string; endpoint: string; pid: number; uptimeMs: number; log: { written: number; dropped: number; lastError: string | null } };
  agents: Array<{ id: string; host: string; pid: number; total: { cpu: number; mem: number; gpus: string[] }; free: { cpu: number; mem: number; gpus: string[] }; executors: number; labels: Record<string, string> }>;
  apps: Array<{
    name: string;
    drivers: number;
    keepAliveMs: number;
    releaseAt: number | null;
    services: Array<{
      id: string;
      name: string;
      kind: "pool" | "gang";
      state: string;
      resreq: string;
      warmup: number;
      max: number | null;
      queued: number;
      blocked: boolean;
      /** Why it waits for placement (service, placed of wanted, each agent's free resources); null when placed in full. */
      pending: PendingReport | null;
      inflight: number;
      error: string | null;
      elastic?: boolean;
      concurrency?: number;
      executors: Array<{ id: string; state: string; agent: string; pid: number | null; rank: number | null; gpus: string[]; inflight: number; callsDone: number; idleMs: number }>;
      /** Executors that died unexpectedly (most recent 10), with how they ended. */
      dead: Array<{ id: string; state: "dead"; agent: string; rank: number | null; code: number | null; signal: string | null; agoMs: number; detail: string }>;
    }>;
  }>;
}

function resolveRef(ref: ServiceRef | string): { module: string; exportName: string } {
  let module: string | URL;
  let exportName: string;
  if (typeof ref === "string") {
    const hash = ref.lastIndexOf("#");
    if (hash <= 0 || hash === ref.length - 1) {
      throw new ServiceConfigError(`service reference '${ref}' must look like "./module.js#ExportedClass"`);
    }
    module = ref.slice(0, hash);
    exportName = ref.slice(hash + 1);
  } else if (ref && (typeof ref.module === "string" || ref.module instanceof URL) && typeof ref.export === "string") {
    module = ref.module;
    exportName = ref.export;
  } else {
    throw new ServiceConfigError("a service reference is { module: <path or URL>, export: <class name> } or \"./module.js#Class\"");
  }
  let file: string | undefined;
  if (module instanceof URL || module.startsWith("file:")) file = fileURLToPath(module);
  else if (module.startsWith(".") || path.isAbsolute(module)) file = path.resolve(module);
  if (file !== undefined && !existsSync(file)) {
    throw new ServiceConfigError(`service module ${file} does not exist (resolved from ${String(module)}; relative paths are resolved against ${process.cwd()})`);
  }
  return { module: file ?? String(module), exportName };
}
