/**
 * Executor supervision, one per agent: sets up an executor's project, spawns
 * it with its own credential and its GPUs pinned through
 * CUDA_VISIBLE_DEVICES, keeps its log and the tail of its stderr, stops it
 * (SIGTERM, then SIGKILL after a grace period), and reports every exit. What
 * it reports goes to the head through its agent.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { num, str, type Header } from "../sdk/wire/codec.js";
import { APP_TOKEN_ENV, EXECUTOR_TOKEN_ENV, SECRET_FILE_ENV, deriveKey, rendezvousKey } from "../sdk/wire/auth.js";
import { ProjectSetupError } from "../sdk/errors/index.js";
import { toWireError } from "../sdk/wire/errors.js";
import { HearthError } from "../sdk/errors/index.js";
import { nodeFlags, tunedEnv } from "../sdk/runtime/process-tuning.js";
import { CURVE_CLIENT_ENV, CURVE_KEYS_ENV, curveClientFromEnv } from "../sdk/wire/curve.js";
import { ProjectStore } from "./projects.js";
import type { ExecutorIdentity, ExecutorUsers } from "./executor-users.js";
import { makeScratch, removeScratch, sweepScratch } from "./executor-scratch.js";

/** The routing id an executor connects with (to the head and to its agent's cache), set by its agent. */
export const EXECUTOR_ROUTING_ID_ENV = "HEARTH_EXECUTOR_ROUTING_ID";

const EXECUTOR_MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "executor-main.js");

/** What supervision needs from its agent. */
export interface SupervisorOptions {
  agentId: string;
  /** Address other nodes use to reach this one (gang rendezvous). */
  host: string;
  /** The head's endpoint, handed to executors. */
  head: string;
  /** The cluster secret: each executor gets a credential derived from it, never the secret. */
  secret: Buffer;
  /** Holds the `logs` folder, and the projects of executors that share the agent's user. */
  workDir: string;
  /** Who each app's executors run as (executor-users.ts). */
  users: ExecutorUsers;
  /** The bytes of a project archive (through the node cache). */
  fetchProject: (app: string, key: string) => Promise<Buffer>;
  /** The node cache's endpoint, handed to executors. */
  cacheEndpoint: () => string;
  /** Sends a `start-failed` or `exit` message to the head. */
  report: (message: Record<string, unknown>) => void;
  /** Called when the last executor exited. */
  onEmpty: () => void;
  log: (line: string) => void;
}

/** An executor as a re-registration reports it, so a restarted head can adopt it warm. */
export interface LiveExecutor {
  id: string;
  serviceId: string;
  rank: number | null;
  gpus: string[];
  pid: number;
  /** The executor finished init (it told its agent over IPC). */
  ready: boolean;
}

interface Child {
  app: string;
  /** What a re-registration reports, so a restarted head can adopt the executor warm. */
  serviceId: string;
  rank: number | null;
  gpus: string[];
  /** The executor finished init (it says so over IPC as it tells the head). */
  ready: boolean;
  proc: ChildProcess;
  stderrTail: string;
  killTimer?: NodeJS.Timeout;
}

/** The executors of one agent. */
export class ExecutorSupervisor {
  private readonly children = new Map<string, Child>();
  /** Executors whose project is still being set up, and those stopped meanwhile. */
  private readonly settingUp = new Set<string>();
  private readonly cancelled = new Set<string>();
  /** Project stores: one per app user (its files readable by that app's group only), and the agent's own. */
  private readonly stores = new Map<number, ProjectStore>();

  constructor(private readonly opts: SupervisorOptions) {}

  private projectsFor(identity: ExecutorIdentity | undefined): ProjectStore {
    const key = identity?.uid ?? -1;
    let store = this.stores.get(key);
    if (!store) {
      store = identity ? new ProjectStore(identity.root, this.opts.log, identity.gid) : new ProjectStore(this.opts.workDir, this.opts.log);
      this.stores.set(key, store);
    }
    return store;
  }

  /** The app executor `id` runs, if it runs here (the node cache admits only these). */
  appOf(id: string): string | undefined {
    return this.children.get(id)?.app;
  }

  /** Executors running or being set up. */
  get size(): number {
    return this.children.size + this.settingUp.size;
  }

  /** Running executors, for a (re-)registration. */
  live(): LiveExecutor[] {
    return [...this.children].map(([id, c]) => ({ id, serviceId: c.serviceId, rank: c.rank, gpus: c.gpus, pid: c.proc.pid ?? 0, ready: c.ready }));
  }

  /** Tells every executor to announce itself to the head (after a head restart). */
  announce(): void {
    for (const c of this.children.values()) if (c.proc.connected) c.proc.send({ t: "announce" });
  }

  /** Stops every running executor with `graceMs`; returns how many were running. */
  stopAll(graceMs: number): number {
    for (const id of this.children.keys()) this.stop(id, graceMs);
    return this.children.size;
  }

  /** Sets up the project (if any) and spawns the executor a `start` message describes; a failure is reported, never thrown. */
  async start(h: Header): Promise<void> {
    const id = str(h, "executor");
    const gpus = Array.isArray(h.gpus) ? h.gpus.map(String) : [];
    let module = str(h, "module");
    let identity: ExecutorIdentity | undefined;
    try {
      identity = this.opts.users.identityFor(str(h, "app"));
    } catch (err) {
      this.opts.log(`executor ${id}: ${(err as Error).message}`);
      const error = new HearthError(`agent ${this.opts.agentId} cannot start executor ${id}: ${(err as Error).message}`, { cause: err });
      this.opts.report({ t: "start-failed", executor: id, error: toWireError(error) });
      return;
    }
    const project = h.project as { hash: string; key: string } | undefined;
    if (project) {
      const app = str(h, "app");
      this.settingUp.add(id);
      try {
        const dir = await this.projectsFor(identity).ensure(project.hash, () => this.opts.fetchProject(app, project.key));
        module = path.join(dir, module);
      } catch (err) {
        this.opts.log(`executor ${id}: project ${project.hash} could not be set up: ${(err as Error).message}`);
        const error = new ProjectSetupError(`project ${project.hash} could not be set up on agent ${this.opts.agentId}: ${(err as Error).message}`, { project: project.hash, agentId: this.opts.agentId, executorId: id, cause: err });
        this.opts.report({ t: "start-failed", executor: id, error: toWireError(error) });
        return;
      } finally {
        this.settingUp.delete(id);
      }
      if (this.cancelled.delete(id)) {
        this.opts.report({ t: "exit", executor: id, code: null, signal: null, detail: "stopped before it started" });
        return;
      }
    }
    const context = {
      executorId: id,
      agentId: this.opts.agentId,
      host: this.opts.host,
      app: str(h, "app"),
      service: str(h, "service"),
      module,
      export: str(h, "export"),
      concurrency: num(h, "concurrency"),
      gpus,
      resources: { cpu: num(h, "cpu"), mem: num(h, "mem"), gpu: gpus.length },
      rank: typeof h.rank === "number" ? h.rank : null,
      worldSize: typeof h.worldSize === "number" ? h.worldSize : null,
      rendezvous:
        typeof h.masterPort === "number"
          ? { host: String(h.masterAddr), port: h.masterPort, key: rendezvousKey(this.opts.secret, str(h, "app"), str(h, "serviceId"), h.masterPort).toString("hex") }
          : null,
    };
    const curve = curveClientFromEnv();
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ...tunedEnv(),
      // Its own credential and a random routing id, never the cluster secret (nor where the file is).
      [SECRET_FILE_ENV]: undefined,
      // CURVE's client half only, by value: the key file also holds the head's secret key.
      [CURVE_KEYS_ENV]: undefined,
      [CURVE_CLIENT_ENV]: curve ? JSON.stringify(curve) : undefined,
      [EXECUTOR_TOKEN_ENV]: deriveKey(this.opts.secret, "executor", id, str(h, "app")).toString("hex"),
      // A service declared with drivesApp (a run's loop) opens its own app as a driver: that app's token, nothing wider.
      [APP_TOKEN_ENV]: h.drivesApp === true ? deriveKey(this.opts.secret, "driver", str(h, "app"), str(h, "app")).toString("hex") : undefined,
      [EXECUTOR_ROUTING_ID_ENV]: `x.${id}.${randomBytes(12).toString("hex")}`,
      HEARTH_HEAD: this.opts.head,
      HEARTH_EXECUTOR_ID: id,
      HEARTH_EXECUTOR_CONTEXT: JSON.stringify(context),
      HEARTH_AGENT_CACHE: this.opts.cacheEndpoint(),
      HEARTH_AGENT_PID: String(process.pid),
      CUDA_VISIBLE_DEVICES: gpus.join(","),
    };
    if (context.rank !== null && context.rendezvous) {
      Object.assign(env, {
        RANK: String(context.rank),
        WORLD_SIZE: String(context.worldSize),
        MASTER_ADDR: context.rendezvous.host,
        MASTER_PORT: String(context.rendezvous.port),
      });
    }
    if (identity) {
      // The app's own user: nothing of the agent's (HEARTH_HOME, its HOME) in reach, a private HOME of its own.
      Object.assign(env, { HEARTH_HOME: undefined, HOME: identity.home, USER: `hearth-u${identity.uid}`, LOGNAME: `hearth-u${identity.uid}` });
    }
    // Its own temp folder, removed after it exits (executor-scratch.ts): what it leaves there dying does not leak.
    const scratch = makeScratch(this.opts.workDir, id, identity);
    env.TMPDIR = scratch.dir;
    // Said apart, so what it launches elsewhere (a Slurm job, commands.ts `jobEnv`) does not inherit a private folder as its TMPDIR.
    env.HEARTH_EXECUTOR_TMPDIR = scratch.dir;
    for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
    const as = identity ? { uid: identity.uid, gid: identity.gid, cwd: identity.home } : {};
    const proc = spawn(process.execPath, [...nodeFlags(), EXECUTOR_MAIN], { env, stdio: ["ignore", "pipe", "pipe", "ipc"], ...as });
    const child: Child = { app: context.app, serviceId: str(h, "serviceId"), rank: context.rank, gpus, ready: false, proc, stderrTail: "" };
    proc.on("message", (m: { t?: unknown } | null) => {
      if (m?.t === "ready") child.ready = true;
    });
    this.children.set(id, child);
    const logPath = path.join(this.opts.workDir, "logs", `${id}.log`);
    const logFile = createWriteStream(logPath, { mode: 0o600 });
    let logBroken = false;
    // A log that cannot be opened or written (full disk, permissions) must not take the agent down:
    // the executor keeps running, its output is drained and dropped, and the stderr tail is still kept.
    logFile.on("error", (err) => {
      if (logBroken) return;
      logBroken = true;
      this.opts.log(`executor ${id}: cannot write its log ${logPath} (${err.message}); its output is dropped`);
      proc.stdout!.unpipe(logFile);
      proc.stdout!.resume();
    });
    proc.stdout!.pipe(logFile, { end: false });
    proc.stderr!.on("data", (d: Buffer) => {
      if (!logBroken) logFile.write(d);
      child.stderrTail = (child.stderrTail + d.toString()).slice(-2000);
    });
    proc.on("error", (err) => this.opts.log(`executor ${id} could not start: ${err.message}`));
    proc.on("exit", (code, signal) => {
      clearTimeout(child.killTimer);
      this.children.delete(id);
      logFile.end();
      void removeScratch(scratch).then((err) => err && this.opts.log(`executor ${id}: its temp folder ${scratch.dir} was not all removed: ${err}`));
      const detail = child.stderrTail.trim().split("\n").slice(-5).join("\n");
      this.opts.log(`executor ${id} exited (${signal ?? `code ${code}`})`);
      this.opts.report({ t: "exit", executor: id, code, signal, detail });
      if (this.children.size === 0) this.opts.onEmpty();
    });
    this.opts.log(`started executor ${id} of '${context.service}' (pid ${proc.pid}, gpus [${gpus.join(",")}], ${identity ? `uid ${identity.uid}` : "the agent's user"})`);
  }

  /**
   * Removes the temp folders that executors of agents killed before this one
   * left (their executors exited with them); logs what it removed.
   */
  async sweepScratch(): Promise<void> {
    const r = this.opts.users.report;
    const { removed, failed } = await sweepScratch(this.opts.workDir, r.mode === "per-app-uid" ? r.dir : undefined);
    if (removed > 0) this.opts.log(`removed the temp folders of ${removed} executor(s) of an agent that is gone`);
    for (const f of failed) this.opts.log(`could not remove an executor's temp folder: ${f}`);
  }

  /** Stops one executor: SIGTERM, then SIGKILL after `graceMs` (at once when `graceMs` <= 0); unknown ids are reported gone. */
  stop(id: string, graceMs: number): void {
    const child = this.children.get(id);
    if (!child && this.settingUp.has(id)) {
      this.cancelled.add(id);
      return;
    }
    if (!child) {
      this.opts.report({ t: "exit", executor: id, code: null, signal: null, detail: "not running on this agent" });
      return;
    }
    if (graceMs <= 0) {
      // A recycle: the executor may be wedged in synchronous code, so close() could never run.
      child.proc.kill("SIGKILL");
      return;
    }
    child.proc.kill("SIGTERM");
    child.killTimer ??= setTimeout(() => child.proc.kill("SIGKILL"), graceMs);
  }
}
