/**
 * The agent: one per node. Registers its resources with the head, starts and
 * supervises executor processes (one per service instance) with their GPUs
 * pinned through CUDA_VISIBLE_DEVICES, heartbeats, and reports every
 * executor exit. Executors exit on their own if the agent dies (a watchdog
 * thread in each executor polls its parent pid), and the agent exits on its
 * own when its head has been silent past a grace period.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { DealerChannel } from "../sdk/wire/channel.js";
import { decodeHeader, encode, num, str, type Header } from "../sdk/wire/codec.js";
import { truncateLogLine } from "../sdk/wire/errors.js";
import { PendingRequests } from "../sdk/wire/requests.js";
import { curveClientFromEnv } from "../sdk/wire/curve.js";
import { randomBytes } from "node:crypto";
import { APP_TOKEN_ENV, EXECUTOR_TOKEN_ENV, SECRET_FILE_ENV, credentialFrom, deriveKey, loadSecret, secretFile } from "../sdk/wire/auth.js";
import { NodeCache } from "./node-cache.js";
import { ProjectStore } from "./projects.js";
import { detectResources, type NodeResources } from "./resources.js";

/** Agent settings; anything left out is detected. */
export interface AgentOptions {
  head: string;
  id?: string;
  /** Address other nodes use to reach this one (gang rendezvous). Default 127.0.0.1 for a loopback head, else the hostname. */
  host?: string;
  resources?: Partial<NodeResources>;
  /** Folder for executor logs and (later) unpacked projects. */
  workDir?: string;
  labels?: Record<string, string>;
  log?: (line: string) => void;
  /** Memory for the node-local object cache. Default a quarter of this machine's memory. */
  cacheMem?: number;
  /** Exit after hosting no executor for this long (agents of Slurm jobs: the job ends). Default: never. */
  exitWhenIdleMs?: number;
  /**
   * Exit (stopping every executor) when nothing was heard from the head for
   * this long: a crashed head leaves no agent behind. Default 60 s.
   */
  headGraceMs?: number;
  /** The cluster secret (it proves the agent role, and checks executors at the cache socket). Default: HEARTH_SECRET_FILE, else HEARTH_HOME's. */
  secret?: Buffer;
}

/** The routing id an executor connects with (to the head and to its agent's cache), set by its agent. */
export const EXECUTOR_ROUTING_ID_ENV = "HEARTH_EXECUTOR_ROUTING_ID";

/** Default of AgentOptions.headGraceMs. */
export const HEAD_GRACE_MS = 60_000;

const EXECUTOR_MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "executor-main.js");

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

/** A running agent. */
export class Agent {
  readonly id: string;
  readonly resources: NodeResources;
  readonly host: string;
  private readonly channel: DealerChannel;
  private readonly headRequests: PendingRequests;
  /** Node-local object cache: executors read objects through it, so bytes cross from the head once per node. */
  readonly cache: NodeCache;
  private readonly children = new Map<string, Child>();
  private readonly workDir: string;
  private readonly projects: ProjectStore;
  /** Executors whose project is still being set up, and those stopped meanwhile. */
  private readonly settingUp = new Set<string>();
  private readonly cancelled = new Set<string>();
  private readonly log: (line: string) => void;
  private heartbeat?: NodeJS.Timeout;
  private lastHeard = Date.now();
  /** When `register` was last sent, and whether the head answered it (queued heartbeats each earn a `reregister`). */
  private registerSentAt = 0;
  private registered = false;
  private closed = false;
  private done!: () => void;
  /** Resolves when the agent has stopped (head said bye, or close()). */
  readonly stopped: Promise<void>;

  private constructor(
    private readonly opts: AgentOptions,
    private readonly secret: Buffer,
  ) {
    this.id = opts.id ?? `${os.hostname()}-${process.pid}`;
    const detected = detectResources();
    this.resources = { ...detected, ...Object.fromEntries(Object.entries(opts.resources ?? {}).filter(([, v]) => v !== undefined)) };
    this.host = opts.host ?? (/127\.0\.0\.1|localhost/.test(opts.head) ? "127.0.0.1" : os.hostname());
    this.workDir = opts.workDir ?? path.join(os.tmpdir(), `hearth-agent-${this.id}`);
    const sink = opts.log ?? ((line: string) => process.stderr.write(`${new Date().toISOString()} agent ${this.id} ${line}\n`));
    this.log = (line) => sink(truncateLogLine(line));
    // A random routing id: the head binds it to the proven agent credential, so it must not be guessable.
    this.channel = new DealerChannel(`a.${this.id}.${randomBytes(12).toString("hex")}`, {
      maxMessageSize: 64 * 1024 * 1024,
      onError: (err) => this.log(`socket error: ${String(err)}`),
      curveClient: curveClientFromEnv(), // executors inherit HEARTH_CURVE_KEYS from this process
      auth: credentialFrom(secret, "agent", this.id),
      onAuthFailed: (err) => this.log(`the head refused this agent's credential: ${err.message}`),
    });
    this.headRequests = new PendingRequests(this.channel, `head at ${opts.head}`);
    // Only this agent's own executors, each with its own credential, may read the cache.
    this.cache = new NodeCache({
      agentId: this.id,
      head: opts.head,
      secret,
      control: this.headRequests,
      memLimit: opts.cacheMem ?? Math.floor(os.totalmem() / 4),
      appOf: (executorId) => this.children.get(executorId)?.app,
      log: this.log,
    });
    this.projects = new ProjectStore(this.workDir, this.log);
    this.stopped = new Promise((r) => (this.done = r));
  }

  /** Connects to the head, registers, serves the node-local cache, and starts heartbeating. */
  static async start(opts: AgentOptions): Promise<Agent> {
    const agent = new Agent(opts, opts.secret ?? loadSecret(secretFile()));
    mkdirSync(path.join(agent.workDir, "logs"), { recursive: true });
    await agent.cache.start();
    agent.channel.connect(opts.head);
    void agent.channel.serve((frames) => agent.onMessage(decodeHeader(frames[0]), frames));
    agent.register();
    let idleSince = Date.now();
    const headGraceMs = opts.headGraceMs ?? HEAD_GRACE_MS;
    agent.heartbeat = setInterval(() => {
      agent.channel.send([encode({ t: "hb" })]);
      agent.cache.sweep();
      const silent = Date.now() - agent.lastHeard;
      if (silent > headGraceMs) {
        agent.log(`nothing heard from the head at ${opts.head} for ${Math.round(silent / 1000)} s (grace ${headGraceMs / 1000} s); stopping executors and exiting`);
        void agent.close(2000);
        return;
      }
      if (agent.children.size > 0 || agent.settingUp.size > 0) idleSince = Date.now();
      else if (opts.exitWhenIdleMs !== undefined && Date.now() - idleSince >= opts.exitWhenIdleMs) {
        agent.log(`no executor for ${opts.exitWhenIdleMs} ms; exiting`);
        void agent.close();
      }
    }, 1000);
    return agent;
  }

  /** Registers with the head, reporting the live executors (a restarted head adopts them warm). */
  private register(): void {
    const r = this.resources;
    const executors = [...this.children].map(([id, c]) => ({ id, serviceId: c.serviceId, rank: c.rank, gpus: c.gpus, pid: c.proc.pid ?? 0, ready: c.ready }));
    this.registerSentAt = Date.now();
    this.registered = false;
    this.channel.send([encode({ t: "register", host: this.host, pid: process.pid, cpu: r.cpu, mem: r.mem, gpus: r.gpus, labels: this.opts.labels ?? {}, executors })]);
  }

  private onMessage(h: Header, frames: Buffer[]): void {
    this.lastHeard = Date.now();
    switch (h.t) {
      case "hb":
        return;
      case "rep":
        this.headRequests.deliver(h, frames);
        return;
      case "registered":
        if (!this.registered) {
          this.log(`registered with head ${String(h.headId)} at ${this.opts.head}`);
          // Executors that outlived a head restart announce themselves, so the new head knows their connections are up.
          for (const c of this.children.values()) if (c.proc.connected) c.proc.send({ t: "announce" });
        }
        this.registered = true;
        return;
      case "reregister":
        // One register per round trip: heartbeats queued while the head was down each earn a `reregister`.
        if (!this.registered && Date.now() - this.registerSentAt < 2000) return;
        // The executors keep running: the head adopts those it can (same pid, warm state) and stops the others.
        this.log(`head does not know this agent (restarted?); registering again with ${this.children.size} live executor(s)`);
        this.register();
        return;
      case "start":
        void this.startExecutor(h);
        return;
      case "stop":
        this.stopExecutor(str(h, "executor"), num(h, "graceMs"));
        return;
      case "req":
        void this.answer(h);
        return;
      case "bye":
        this.log("head said bye");
        void this.close();
        return;
      case "err":
        this.log(`head rejected a message: ${JSON.stringify(h.error)}`);
        return;
      default:
        this.log(`ignoring unknown message '${h.t}' from the head`);
    }
  }

  private async answer(h: Header): Promise<void> {
    const rid = num(h, "rid");
    try {
      if (h.op !== "reserve-port") throw new Error(`unknown request '${String(h.op)}'`);
      const port = await freePort(this.host);
      this.channel.send([encode({ t: "rep", rid, ok: true, port })]);
    } catch (err) {
      this.channel.send([encode({ t: "rep", rid, ok: false, error: { name: "Error", message: (err as Error).message } })]);
    }
  }

  private async startExecutor(h: Header): Promise<void> {
    const id = str(h, "executor");
    const gpus = Array.isArray(h.gpus) ? h.gpus.map(String) : [];
    let module = str(h, "module");
    const project = h.project as { hash: string; key: string } | undefined;
    if (project) {
      const app = str(h, "app");
      this.settingUp.add(id);
      try {
        const dir = await this.projects.ensure(project.hash, () => this.cache.read(app, project.key));
        module = path.join(dir, module);
      } catch (err) {
        this.log(`executor ${id}: project ${project.hash} could not be set up: ${(err as Error).message}`);
        this.channel.send([encode({ t: "start-failed", executor: id, error: { name: "ProjectSetupError", message: `project ${project.hash} could not be set up on agent ${this.id}: ${(err as Error).message}` } })]);
        return;
      } finally {
        this.settingUp.delete(id);
      }
      if (this.cancelled.delete(id)) {
        this.channel.send([encode({ t: "exit", executor: id, code: null, signal: null, detail: "stopped before it started" })]);
        return;
      }
    }
    const context = {
      executorId: id,
      agentId: this.id,
      host: this.host,
      app: str(h, "app"),
      service: str(h, "service"),
      module,
      export: str(h, "export"),
      concurrency: num(h, "concurrency"),
      gpus,
      resources: { cpu: num(h, "cpu"), mem: num(h, "mem"), gpu: gpus.length },
      rank: typeof h.rank === "number" ? h.rank : null,
      worldSize: typeof h.worldSize === "number" ? h.worldSize : null,
      rendezvous: typeof h.masterPort === "number" ? { host: String(h.masterAddr), port: h.masterPort } : null,
    };
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      // Its own credential and a random routing id, never the cluster secret (nor where the file is).
      [SECRET_FILE_ENV]: undefined,
      [APP_TOKEN_ENV]: undefined,
      [EXECUTOR_TOKEN_ENV]: deriveKey(this.secret, "executor", id, str(h, "app")).toString("hex"),
      [EXECUTOR_ROUTING_ID_ENV]: `x.${id}.${randomBytes(12).toString("hex")}`,
      HEARTH_HEAD: this.opts.head,
      HEARTH_EXECUTOR_ID: id,
      HEARTH_EXECUTOR_CONTEXT: JSON.stringify(context),
      HEARTH_AGENT_CACHE: this.cache.address,
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
    const proc = spawn(process.execPath, [EXECUTOR_MAIN], { env, stdio: ["ignore", "pipe", "pipe", "ipc"] });
    const child: Child = { app: context.app, serviceId: str(h, "serviceId"), rank: context.rank, gpus, ready: false, proc, stderrTail: "" };
    proc.on("message", (m: { t?: unknown } | null) => {
      if (m?.t === "ready") child.ready = true;
    });
    this.children.set(id, child);
    const logPath = path.join(this.workDir, "logs", `${id}.log`);
    const logFile = createWriteStream(logPath);
    let logBroken = false;
    // A log that cannot be opened or written (full disk, permissions) must not take the agent down:
    // the executor keeps running, its output is drained and dropped, and the stderr tail is still kept.
    logFile.on("error", (err) => {
      if (logBroken) return;
      logBroken = true;
      this.log(`executor ${id}: cannot write its log ${logPath} (${err.message}); its output is dropped`);
      proc.stdout!.unpipe(logFile);
      proc.stdout!.resume();
    });
    proc.stdout!.pipe(logFile, { end: false });
    proc.stderr!.on("data", (d: Buffer) => {
      if (!logBroken) logFile.write(d);
      child.stderrTail = (child.stderrTail + d.toString()).slice(-2000);
    });
    proc.on("error", (err) => this.log(`executor ${id} could not start: ${err.message}`));
    proc.on("exit", (code, signal) => {
      clearTimeout(child.killTimer);
      this.children.delete(id);
      logFile.end();
      const detail = child.stderrTail.trim().split("\n").slice(-5).join("\n");
      this.log(`executor ${id} exited (${signal ?? `code ${code}`})`);
      this.channel.send([encode({ t: "exit", executor: id, code, signal, detail })]);
      if (this.closed && this.children.size === 0) this.finish();
    });
    this.log(`started executor ${id} of '${context.service}' (pid ${proc.pid}, gpus [${gpus.join(",")}])`);
  }

  private stopExecutor(id: string, graceMs: number): void {
    const child = this.children.get(id);
    if (!child && this.settingUp.has(id)) {
      this.cancelled.add(id);
      return;
    }
    if (!child) {
      this.channel.send([encode({ t: "exit", executor: id, code: null, signal: null, detail: "not running on this agent" })]);
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

  /** Stops every executor (close() first, then SIGKILL after a grace period) and leaves. Idempotent. */
  async close(graceMs = 5000): Promise<void> {
    if (this.closed) return this.stopped;
    this.closed = true;
    clearInterval(this.heartbeat);
    for (const id of this.children.keys()) this.stopExecutor(id, graceMs);
    if (this.children.size === 0) this.finish();
    return this.stopped;
  }

  private finish(): void {
    void Promise.all([this.channel.flush(), this.cache.close()]).then(() => {
      this.channel.close();
      this.done();
    });
  }
}

/** Asks the OS for a free TCP port on `host`. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, host, () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}
