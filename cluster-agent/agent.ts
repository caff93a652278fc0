/**
 * The agent: one per node. It owns the link to the head (register,
 * heartbeats, re-registration after a head restart, the head's requests) and
 * composes the two things a node does: executor supervision
 * (executor-supervisor.ts: spawn, logs, stop, exit reports) and the node
 * cache (node-cache.ts: executors' object reads, fetched from the head once
 * per node). Executors exit on their own if the agent dies (a watchdog
 * thread in each executor polls its parent pid), and the agent exits on its
 * own, stopping its executors, when its head has been silent past a grace
 * period.
 */
import { existsSync, mkdirSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { DealerChannel } from "../sdk/wire/channel.js";
import { decodeHeader, encode, num, str, type Header } from "../sdk/wire/codec.js";
import { truncateLogLine } from "../sdk/format.js";
import { ProtocolError, toWireError } from "../sdk/wire/errors.js";
import { PendingRequests } from "../sdk/wire/requests.js";
import { curveClientFromEnv } from "../sdk/wire/curve.js";
import { createHash, randomBytes } from "node:crypto";
import { credentialFrom, loadSecret, secretFile } from "../sdk/wire/auth.js";
import { ExecutorSupervisor } from "./executor-supervisor.js";
import { NodeCache } from "./node-cache.js";
import { parseSealNotice } from "./seal-notice.js";
import { LogSink } from "./log-sink.js";
import { ExecutorUsers, type UidRange } from "./executor-users.js";
import { detectResources, memoryReport, type NodeResources } from "./resources.js";
import { isMemoryBacked, pickMedium, type Medium, type MediumChoice } from "./storage-medium.js";

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
  /** Memory for the node cache's small parts. Default a quarter of this machine's memory. */
  cacheMem?: number;
  /**
   * Folder of the node cache's part files (emptied at start). Default
   * `<work-dir>/cache`, or `<executor-dir>/cache-<id>` when executors run as
   * their apps' own users (they must be able to reach it). A tmpfs
   * (`/dev/shm/...`) keeps copies in memory.
   */
  cacheDir?: string;
  /** Bytes of part files the node cache keeps at most. Default a quarter of this machine's memory. */
  cacheLimit?: number;
  /**
   * Without `cacheDir`: the node cache on memory-backed /dev/shm (`/dev/shm/hearth-cache-<id>-<digest of the work dir>`) or on disk
   * (the default above). Default "auto": memory where the limit fits (storage-medium.ts).
   */
  cacheMedium?: MediumChoice;
  /** TCP connections one address may hold to the node cache (default 4096). */
  cacheMaxConnectionsPerSource?: number;
  /** Exit after hosting no executor for this long (agents of Slurm jobs: the job ends). Default: never. */
  exitWhenIdleMs?: number;
  /**
   * Exit (stopping every executor) when nothing was heard from the head for
   * this long: a crashed head leaves no agent behind. Default 60 s.
   */
  headGraceMs?: number;
  /** The cluster secret (it proves the agent role, and checks executors at the cache socket). Default: HEARTH_SECRET_FILE, else HEARTH_HOME's. */
  secret?: Buffer;
  /**
   * Who executors run as (executor-users.ts): a range of uids (each app gets its own), or "none" (the
   * agent's own user). Default: DEFAULT_EXECUTOR_UIDS when the agent runs as root, else its own user.
   */
  executorUids?: UidRange | "none";
  /** Parent of each app's executor folders when they run as their own users. Default `<tmpdir>/hearth-executors`. */
  executorDir?: string;
}

/** The routing id an executor connects with (to the head and to its agent's cache), set by its agent. */
export { EXECUTOR_ROUTING_ID_ENV } from "./executor-supervisor.js";

/** Default of AgentOptions.headGraceMs. */
export const HEAD_GRACE_MS = 60_000;

/** A running agent. */
export class Agent {
  readonly id: string;
  readonly resources: NodeResources;
  readonly host: string;
  private readonly channel: DealerChannel;
  private readonly headRequests: PendingRequests;
  /** Node-local object cache: executors read objects through it, so bytes cross from the head once per node. */
  readonly cache: NodeCache;
  /** The executors this agent spawned: their processes, logs and exit reports. */
  private readonly executors: ExecutorSupervisor;
  private readonly workDir: string;
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
    secret: Buffer,
    detected: NodeResources,
    private readonly users: ExecutorUsers,
    cacheDir: CacheDirChoice,
  ) {
    this.id = opts.id ?? `${os.hostname()}-${process.pid}`;
    this.resources = { ...detected, ...Object.fromEntries(Object.entries(opts.resources ?? {}).filter(([, v]) => v !== undefined)) };
    this.host = opts.host ?? (/127\.0\.0\.1|localhost/.test(opts.head) ? "127.0.0.1" : os.hostname());
    this.workDir = opts.workDir ?? path.join(os.tmpdir(), `hearth-agent-${this.id}`);
    const stderr = new LogSink(`agent ${this.id}`);
    const sink = opts.log ?? ((line: string) => stderr.write(line));
    this.log = (line) => sink(truncateLogLine(line));
    // A random routing id: the head binds it to the proven agent credential, so it must not be guessable.
    this.channel = new DealerChannel(`a.${this.id}.${randomBytes(12).toString("hex")}`, {
      maxMessageSize: 64 * 1024 * 1024,
      onError: (err) => this.log(`socket error: ${String(err)}`),
      curveClient: curveClientFromEnv(), // executors get the client keys by value (HEARTH_CURVE_CLIENT)
      auth: credentialFrom(secret, "agent", this.id),
      onAuthFailed: (err) => this.log(`the head refused this agent's credential: ${err.message}`),
    });
    this.headRequests = new PendingRequests(this.channel, `head at ${opts.head}`);
    // Only this agent's own executors, each with its own credential, may read the cache.
    const isolated = users.report.mode === "per-app-uid";
    this.cache = new NodeCache({
      agentId: this.id,
      head: opts.head,
      secret,
      control: this.headRequests,
      memLimit: opts.cacheMem ?? Math.floor(os.totalmem() / 4),
      cacheDir: cacheDir.dir,
      medium: cacheDir.medium,
      siblings: cacheDir.siblings,
      fileLimit: opts.cacheLimit ?? Math.floor(os.totalmem() / 4),
      host: this.host,
      appOf: (executorId) => this.executors.appOf(executorId),
      groupOf: (app) => (isolated ? users.identityFor(app)?.gid : undefined),
      userOf: (app) => (isolated ? users.identityFor(app)?.uid : process.geteuid?.()),
      maxConnectionsPerSource: opts.cacheMaxConnectionsPerSource,
      log: this.log,
    });
    this.executors = new ExecutorSupervisor({
      agentId: this.id,
      host: this.host,
      head: opts.head,
      secret,
      workDir: this.workDir,
      users,
      fetchProject: (app, key) => this.cache.read(app, key),
      cacheEndpoint: () => this.cache.address,
      report: (message) => this.channel.send([encode(message)]),
      onEmpty: () => {
        if (this.closed) this.finish();
      },
      log: this.log,
    });
    this.stopped = new Promise((r) => (this.done = r));
  }

  /** Connects to the head, registers, serves the node-local cache, and starts heartbeating. */
  static async start(opts: AgentOptions): Promise<Agent> {
    // Detecting GPUs runs nvidia-smi: done here, not in the constructor (constructors do no I/O).
    const secret = opts.secret ?? loadSecret(secretFile());
    // Makes the root-owned folder of the apps' executor files when it runs as root: I/O, so not in the constructor.
    const users = ExecutorUsers.create({ uids: opts.executorUids, dir: opts.executorDir, secret });
    const agent = new Agent(opts, secret, detectResources(), users, chooseCacheDir(opts, users));
    agent.log(users.describe());
    // Private like everything hearth writes (the embedded default's work dir is under HEARTH_HOME): 0700.
    mkdirSync(path.join(agent.workDir, "logs"), { recursive: true, mode: 0o700 });
    await agent.cache.start();
    await agent.executors.sweepScratch();
    agent.channel.connect(opts.head);
    void agent.channel.serve((frames) => agent.onMessage(decodeHeader(frames[0]), frames));
    agent.register();
    let idleSince = Date.now();
    const headGraceMs = opts.headGraceMs ?? HEAD_GRACE_MS;
    agent.heartbeat = setInterval(() => {
      agent.channel.send([encode({ t: "hb", cache: agent.cache.usage(), memory: memoryReport() })]);
      agent.cache.sweep();
      const silent = Date.now() - agent.lastHeard;
      if (silent > headGraceMs) {
        agent.log(`nothing heard from the head at ${opts.head} for ${Math.round(silent / 1000)} s (grace ${headGraceMs / 1000} s); stopping executors and exiting`);
        void agent.close(2000);
        return;
      }
      if (agent.executors.size > 0) idleSince = Date.now();
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
    const executors = this.executors.live();
    this.registerSentAt = Date.now();
    this.registered = false;
    this.channel.send([encode({ t: "register", host: this.host, pid: process.pid, cpu: r.cpu, mem: r.mem, gpus: r.gpus, labels: this.opts.labels ?? {}, isolation: this.users.report, cache: this.cache.peerAddress, executors })]);
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
          this.executors.announce();
        }
        this.registered = true;
        return;
      case "reregister":
        // One register per round trip: heartbeats queued while the head was down each earn a `reregister`.
        if (!this.registered && Date.now() - this.registerSentAt < 2000) return;
        // The executors keep running: the head adopts those it can (same pid, warm state) and stops the others.
        this.log(`head does not know this agent (restarted?); registering again with ${this.executors.live().length} live executor(s)`);
        this.register();
        return;
      case "start":
        void this.executors.start(h);
        return;
      case "obj-dropped":
        // The head deleted these objects (or released their app): free this node's copies too.
        this.cache.drop(str(h, "app"), typeof h.prefix === "string" ? h.prefix : "");
        return;
      case "obj-sealed":
        // A part of a base upload is whole at the head (or it committed, or was dropped): copied ahead when this node holds the object.
        try {
          this.cache.precopy(str(h, "app"), parseSealNotice(h));
        } catch (err) {
          this.log(`ignored a malformed obj-sealed notice from the head: ${(err as Error).message}`);
        }
        return;
      case "stop":
        this.executors.stop(str(h, "executor"), num(h, "graceMs"));
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
      if (h.op !== "reserve-port") throw new ProtocolError(`agent ${this.id}: unknown request '${String(h.op)}' from the head`);
      const port = await freePort(this.host);
      this.channel.send([encode({ t: "rep", rid, ok: true, port })]);
    } catch (err) {
      this.channel.send([encode({ t: "rep", rid, ok: false, error: toWireError(err) })]);
    }
  }

  /** Stops every executor (close() first, then SIGKILL after a grace period) and leaves. Idempotent. */
  async close(graceMs = 5000): Promise<void> {
    if (this.closed) return this.stopped;
    this.closed = true;
    clearInterval(this.heartbeat);
    if (this.executors.stopAll(graceMs) === 0) this.finish();
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

/**
 * The name of agent `id`'s node cache folder in folders agents share
 * (/dev/shm as `hearth-cache-<name>`, the executor dir as `cache-<name>`):
 * it names the work dir's digest too, so two agents of one id (each
 * HEARTH_HOME's "local") never meet there.
 */
export function nodeCacheName(id: string, workDir: string): string {
  return `${id.replace(/[^A-Za-z0-9._-]/g, "_")}-${createHash("sha256").update(path.resolve(workDir)).digest("hex").slice(0, 10)}`;
}

/** The node cache's folder, what it is on, and where it lies beside other agents' (whose dead ones it sweeps). */
interface CacheDirChoice {
  dir: string;
  medium: Medium;
  siblings?: { parent: string; names: RegExp };
}

/**
 * The node cache's folder: `--cache-dir` as given, else on memory-backed
 * /dev/shm where the cache's limit fits (storage-medium.ts), else on disk:
 * `<work-dir>/cache`, or `<executor-dir>/cache-<id>-<digest of the work dir>` when executors run as
 * their apps' own users (they must be able to reach it).
 */
function chooseCacheDir(opts: AgentOptions, users: ExecutorUsers): CacheDirChoice {
  const id = opts.id ?? `${os.hostname()}-${process.pid}`;
  if (opts.cacheDir) {
    const dir = path.resolve(opts.cacheDir);
    const probe = existsSync(dir) ? dir : path.dirname(dir);
    return { dir, medium: { kind: isMemoryBacked(probe) ? "memory" : "disk", dir, why: "--cache-dir" } };
  }
  const workDir = opts.workDir ?? path.join(os.tmpdir(), `hearth-agent-${id}`);
  const name = nodeCacheName(id, workDir);
  const diskDir = users.report.mode === "per-app-uid" ? path.join(users.report.dir, `cache-${name}`) : path.join(workDir, "cache");
  const medium = pickMedium(opts.cacheMedium ?? "auto", opts.cacheLimit ?? Math.floor(os.totalmem() / 4), path.dirname(diskDir));
  if (medium.kind === "memory") return { dir: path.join(medium.dir, `hearth-cache-${name}`), medium, siblings: { parent: medium.dir, names: /^hearth-cache-.+-[0-9a-f]{10}$/ } };
  if (users.report.mode === "per-app-uid") return { dir: diskDir, medium, siblings: { parent: users.report.dir, names: /^cache-.+-[0-9a-f]{10}$/ } };
  return { dir: diskDir, medium };
}
