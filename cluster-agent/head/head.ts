/**
 * The head process: one ROUTER socket that drivers, agents and executors
 * connect to. Every message passes the authenticator first and is then
 * handed to the protocol of the role its peer proved: drivers
 * (driver-protocol.ts), agents (agent-protocol.ts) and executors
 * (executor-protocol.ts), each with its own liveness. This file composes
 * them around the registry and scheduler (scheduler.ts), owns the socket and
 * the tick, and answers every malformed message with an error instead of
 * crashing.
 */
import { randomUUID } from "node:crypto";
import { RouterChannel } from "../../sdk/wire/channel.js";
import { decodeHeader, encode, type Header } from "../../sdk/wire/codec.js";
import { MessageTooLargeError, toWireError } from "../../sdk/wire/errors.js";
import { truncateLogLine } from "../../sdk/format.js";
import os from "node:os";
import { LogSink } from "../log-sink.js";
import { ObjectService } from "../object-service.js";
import { ObjectStore } from "./object-store.js";
import { isMemoryBacked, pickMedium, type Medium, type MediumChoice } from "../storage-medium.js";
import type { AppRecord } from "./records.js";
import { Scheduler } from "./scheduler.js";
import { buildStatus } from "./status.js";
import { StateFile } from "./persist.js";
import { Recovery } from "./recovery.js";
import { curveGate, type CurveKeys } from "../../sdk/wire/curve.js";
import { checkGateProof, serveZapDomain, type ZapRequest } from "../../sdk/wire/zap.js";
import { connectionsFrom } from "./source-connections.js";
import { Authenticator, type Peer } from "../../sdk/wire/authenticator.js";
import { ensureSecret, secretFile, type Role } from "../../sdk/wire/auth.js";
import { PEER_LIMITS, admitPeer, peerKey, type PeerLimits } from "./peer-roles.js";
import type { HeadContext } from "./head-context.js";
import { DriverProtocol, type DriverContext } from "./driver-protocol.js";
import { AgentProtocol } from "./agent-protocol.js";
import { ExecutorProtocol } from "./executor-protocol.js";

/** The ZAP domain of the head socket's gate. */
const HEAD_ZAP_DOMAIN = "hearth-head";
/** A connection still in the ZeroMQ handshake (greeting, security, gate) after this is closed: a silent connection holds a descriptor no longer. */
const HANDSHAKE_MS = 10_000;

/** Head settings. */
export interface HeadOptions {
  /** Endpoint to bind; port 0 picks a free port. Default tcp://127.0.0.1:0 (loopback only). */
  bind?: string;
  /** How long an app stays warm after its last driver is gone. Default 30 min. */
  keepAliveMs?: number;
  /** A driver silent for this long is considered gone. Default 5 s. */
  driverTimeoutMs?: number;
  /** An agent silent for this long is considered lost. Default 6 s. */
  agentTimeoutMs?: number;
  /** Log sink; default stderr with a timestamp, where a line the disk or pipe refuses is dropped and counted (status `head.log`). */
  log?: (line: string) => void;
  /** Object cache memory limit in bytes. Default half of this machine's memory. */
  memLimit?: number;
  /**
   * Persist objects, apps and service specs here and reload them on start: a
   * head restarted on the same data dir adopts the live executors its agents
   * report (recovery.ts).
   */
  dataDir?: string;
  /** Accept only CURVE clients holding `keys.publicKey` (the head uses the server pair). Default: no CURVE. */
  curve?: CurveKeys;
  /** The longest keep-alive a driver may ask for in `hello`; longer requests are capped. Default 24 h (or keepAliveMs, if longer). */
  maxKeepAliveMs?: number;
  /** Apps the head holds at most; a `hello` for a new app beyond this is refused. Default 1000. */
  maxApps?: number;
  /** The cluster secret every peer's credential is derived from (auth.ts). Default: HEARTH_HOME's, made on first use. */
  secret?: Buffer;
  /** Proven connections the head holds (total, drivers per app, agents); a hello beyond them is refused. Default PEER_LIMITS. */
  peerLimits?: Partial<PeerLimits>;
  /** Connections waiting to prove a credential at once; beyond it the oldest is dropped. Default 1024. */
  maxUnproven?: number;
  /**
   * TCP connections one source address may hold to the head (proven or not,
   * counted by the kernel); a new one beyond it is refused in the ZeroMQ
   * handshake. Default 4096 (every local executor, agent and driver of a
   * one-host cluster comes from 127.0.0.1).
   */
  maxConnectionsPerSource?: number;
  /** Object data bytes one connection may hold without acknowledging it read them (read-credit.ts). Default 256 MiB. */
  maxUnread?: number;
  /**
   * Without a data dir: the parent of the spool folder of large parts (a spool a killed head left
   * there is removed at start). Default: chosen by `spoolMedium`.
   */
  spoolDir?: string;
  /** Without a data dir and `spoolDir`: memory-backed /dev/shm or disk (storage-medium.ts). Default "auto". */
  spoolMedium?: MediumChoice;
}

/** A running head. Create with `Head.start()`. */
export class Head {
  readonly id = randomUUID();
  readonly startedAt = Date.now();
  readonly scheduler: Scheduler;
  readonly objects: ObjectService;
  /** Restoring apps and services, and adopting reported executors, after a restart. */
  readonly recovery: Recovery;
  /** The concrete endpoint after binding. */
  endpoint = "";
  /** Counters for status and tests; `refusedConnections`: closed in the ZeroMQ handshake by the gate. */
  readonly stats = { messages: 0, malformed: 0, refusedConnections: 0, appsCreated: 0 };
  /** Where log lines go without `opts.log` (stderr): lines it could not write are dropped and counted in status. */
  readonly logSink = new LogSink("head");
  private readonly channel: RouterChannel;
  private readonly agentTimeoutMs: number;
  private readonly log: (line: string) => void;
  /** One protocol per proven role; each sees the head only through its context (head-context.ts). */
  private readonly drivers: DriverProtocol;
  private readonly agents: AgentProtocol;
  private readonly executors: ExecutorProtocol;
  private ticker?: NodeJS.Timeout;
  private serving?: Promise<void>;
  private closed = false;
  private onShutdown: () => void = () => {};
  private stopZap?: () => void;
  /** Binds routing ids to proven credentials; every message passes it first (peer-roles.ts says who may do what). */
  private auth!: Authenticator;
  /** The runtime state file, with a data dir. */
  private state?: StateFile;
  /** The bound TCP port (0 until bound, or for a non-TCP endpoint): the gate counts connections to it. */
  private port = 0;
  private unloggedRefusals = 0;
  private lastRefusalLog = 0;
  private lastRefusal = "";

  /** Where large parts are spooled without a data dir (undefined with one): memory or disk, and why. */
  readonly spool?: Medium;

  private constructor(opts: HeadOptions, spool?: Medium) {
    this.spool = spool;
    const keepAliveMs = opts.keepAliveMs ?? 30 * 60_000;
    this.agentTimeoutMs = opts.agentTimeoutMs ?? 6_000;
    const sink = opts.log ?? ((line: string) => this.logSink.write(line));
    this.log = (line) => sink(truncateLogLine(line));
    this.channel = new RouterChannel({
      maxMessageSize: 64 * 1024 * 1024,
      onError: (err) => this.log(`socket error: ${String(err)}`),
      onRefused: (id, frames, err) => this.onRefusedMessage(id, frames, err),
      curveServerSecretKey: opts.curve?.serverSecretKey,
      gateDomain: HEAD_ZAP_DOMAIN,
      handshakeIntervalMs: HANDSHAKE_MS,
      onHandshakeFailed: (why) => this.onRefusedConnection(why),
    });
    this.objects = new ObjectService(new ObjectStore({ memLimit: opts.memLimit ?? Math.floor(os.totalmem() / 2), dataDir: opts.dataDir, spoolDir: spool?.dir }), {
      credit: opts.maxUnread !== undefined ? { limit: opts.maxUnread } : undefined,
      // Node caches drop what the head deleted (set below; no object request arrives before start()).
      onDropped: (app, prefix) => this.agents.dropped(app, prefix),
      // …and nodes that hold an object may copy a new base's parts while it uploads (node-precopy.ts).
      onSealed: (app, notice, origin) => this.agents.sealed(app, notice, origin),
    });
    this.scheduler = new Scheduler({
      toDriver: (id, frames) => this.channel.sendTo(id, frames),
      toAgent: (agent, frames) => this.channel.sendTo(agent.routingId, frames),
      toExecutor: (id, frames) => this.executors.toExecutor(id, frames),
      reservePort: (agent) => this.agents.reservePort(agent),
      log: (m) => this.log(m),
      saveState: () => this.state?.save(),
    });
    this.recovery = new Recovery(this.scheduler, (agent, frames) => this.channel.sendTo(agent.routingId, frames), (m) => this.log(m));
    const ctx = this.context();
    this.drivers = new DriverProtocol(ctx, {
      keepAliveMs,
      maxKeepAliveMs: opts.maxKeepAliveMs ?? Math.max(24 * 3_600_000, keepAliveMs),
      driverTimeoutMs: opts.driverTimeoutMs ?? 5_000,
      maxApps: opts.maxApps ?? 1000,
    });
    this.agents = new AgentProtocol(ctx, this.agentTimeoutMs);
    this.executors = new ExecutorProtocol(ctx);
  }

  /** What the role protocols may use of this head. */
  private context(): DriverContext {
    const ctx: HeadContext = {
      id: this.id,
      scheduler: this.scheduler,
      recovery: this.recovery,
      objects: this.objects,
      sendTo: (route, frames) => this.channel.sendTo(route, frames),
      log: (line) => this.log(line),
      saveState: () => this.state?.save(),
    };
    const endpoint = (): string => this.endpoint; // set when the socket is bound, after the protocols are built
    return {
      ...ctx,
      get endpoint() {
        return endpoint();
      },
      status: (appName, opts) => buildStatus(this, appName, opts),
      appCreated: () => void this.stats.appsCreated++,
      shutdown: () => void this.close(),
    };
  }

  /** Binds, starts serving, and returns the head. */
  static async start(opts: HeadOptions = {}): Promise<Head> {
    // Looking at the machine's storage is I/O: here, not in the constructor.
    const memLimit = opts.memLimit ?? Math.floor(os.totalmem() / 2);
    const spool = opts.dataDir ? undefined : opts.spoolDir ? { kind: isMemoryBacked(opts.spoolDir) ? ("memory" as const) : ("disk" as const), dir: opts.spoolDir, why: "--spool-dir" } : pickMedium(opts.spoolMedium ?? "auto", memLimit, os.tmpdir());
    const head = new Head(opts, spool);
    head.objects.store.open();
    for (const dir of head.objects.store.swept) head.log(`removed the spool a killed head left: ${dir}`);
    if (spool) head.log(`large parts spool on ${spool.kind} under ${head.objects.store.spoolDir} (${spool.why})`);
    if (opts.dataDir) {
      const sched = head.scheduler;
      head.state = new StateFile(opts.dataDir, { apps: sched.apps, ids: sched.ids, hids: sched.router.hids }, (m) => head.log(m));
      const restored = head.state.open();
      if (restored) head.recovery.restore(restored, head.agentTimeoutMs);
    }
    const secret = opts.secret ?? ensureSecret(secretFile());
    // Unset fields (undefined) keep their defaults.
    const peerLimits: PeerLimits = { ...PEER_LIMITS, ...Object.fromEntries(Object.entries(opts.peerLimits ?? {}).filter(([, v]) => v !== undefined)) };
    head.auth = new Authenticator({
      name: "head",
      keyFor: (role, id, app) => peerKey(secret, role, id, app),
      admit: (peer, bound) => admitPeer(peerLimits, peer, bound),
      limits: opts.maxUnproven !== undefined ? { waitingPeers: opts.maxUnproven } : undefined,
      send: (id, frames) => head.channel.sendTo(id, frames),
      deliver: (peer, frames) => head.onMessage(peer, frames),
      onBound: (peer) => {
        if (peer.role === "executor") head.executors.bound(peer.id, peer.routingId);
      },
      log: (m) => head.log(m),
    });
    const curve = opts.curve ? curveGate([opts.curve.publicKey]) : undefined;
    const keyFor = (role: Role, id: string, app: string): Buffer | string => peerKey(secret, role, id, app);
    const perSource = opts.maxConnectionsPerSource ?? 4096;
    head.stopZap = await serveZapDomain(HEAD_ZAP_DOMAIN, (req) => head.gate(req, perSource, curve ? (r) => curve(r.mechanism, r.credentials[0]) : (r) => (r.mechanism === "PLAIN" ? checkGateProof(r.credentials, keyFor) : "no hearth credential in the handshake (an anonymous ZeroMQ peer)")));
    head.endpoint = await head.channel.bind(opts.bind ?? "tcp://127.0.0.1:0");
    head.port = Number(/:(\d+)$/.exec(head.endpoint)?.[1] ?? 0);
    head.serving = head.channel.serve((id, frames) => head.auth.receive(id, frames));
    head.ticker = setInterval(() => head.tick(), 250);
    return head;
  }

  /** Resolves when a driver asked the head to shut down (or `close()` ran). */
  waitForShutdown(): Promise<void> {
    return new Promise((resolve) => (this.onShutdown = resolve));
  }

  /** Stops every executor, tells agents to exit, and closes the socket. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.ticker);
    this.drivers.releaseAll("the head is shutting down");
    this.agents.sayBye();
    await this.channel.flush();
    await new Promise((r) => setTimeout(r, 100));
    this.channel.close();
    this.stopZap?.();
    await this.serving;
    this.objects.close();
    this.objects.store.close();
    this.onShutdown();
  }

  /**
   * The gate (sdk/wire/zap.ts): judges a new connection in the ZeroMQ
   * handshake, where a refusal closes it. It must prove a credential
   * (`proof`), and its source may hold at most `perSource` connections.
   */
  private gate(req: ZapRequest, perSource: number, proof: (req: ZapRequest) => string | undefined): string | undefined {
    let refusal = proof(req);
    if (refusal === undefined && this.port > 0) {
      const n = connectionsFrom(req.address, this.port);
      if (n !== undefined && n > perSource) refusal = `${req.address} holds ${n} connections, over --max-connections-per-source ${perSource}`;
    }
    if (refusal !== undefined) this.lastRefusal = `from ${req.address}: ${refusal}`;
    return refusal;
  }

  /** A connection closed in the handshake: counted; the log gets at most one line per 10 s about them (a flood must not flood the log). */
  private onRefusedConnection(why: string): void {
    this.stats.refusedConnections++;
    this.unloggedRefusals++;
    const now = Date.now();
    if (now - this.lastRefusalLog < 10_000) return;
    this.log(`refused ${this.unloggedRefusals} connection(s) in the handshake since the last such line; the last: ${why}${this.lastRefusal ? `; the gate's last refusal ${this.lastRefusal}` : ""}`);
    this.unloggedRefusals = 0;
    this.lastRefusalLog = now;
  }

  /** Dispatches a message by the role and identity its peer proved at the handshake, never by what its routing id looks like. */
  private onMessage(peer: Peer, frames: Buffer[]): void {
    this.stats.messages++;
    const id = peer.routingId;
    let h: Header | undefined;
    try {
      h = decodeHeader(frames[0]);
      if (peer.role === "agent") this.agents.onMessage(id, peer.id, h, frames);
      else if (peer.role === "executor") this.executors.onMessage(id, peer, h, frames);
      else this.drivers.onMessage(id, peer, h, frames);
    } catch (err) {
      this.stats.malformed++;
      const error = toWireError(err);
      this.log(`rejected message from ${printable(id)}: ${error.name}: ${error.message}`);
      const rid = typeof h?.rid === "number" ? h.rid : undefined;
      this.channel.sendTo(id, [encode(rid !== undefined ? { t: "rep", rid, ok: false, error, head: this.id } : { t: "err", error, head: this.id })]);
    }
  }

  /** A message over the channel's bounds (channel.ts): a proven peer is told why, an unproven one nothing. */
  private onRefusedMessage(id: Buffer, frames: Buffer[], err: MessageTooLargeError): void {
    this.stats.malformed++;
    const peer = this.auth.peer(id);
    this.log(`refused a message from ${printable(id)}${peer ? "" : " (unproven)"}: ${err.message}`);
    if (!peer) return;
    let rid: unknown;
    try {
      // A header is small; a huge first frame is not worth decoding just to find a rid.
      if (frames[0] && frames[0].length <= 64 * 1024) rid = decodeHeader(frames[0]).rid;
    } catch {
      // No usable header: the generic error below still names the limit.
    }
    const error = toWireError(err);
    this.channel.sendTo(id, [encode(typeof rid === "number" ? { t: "rep", rid, ok: false, error, head: this.id } : { t: "err", error, head: this.id })]);
  }

  /** Liveness of every role, then deadlines, idle pools, object expiry and a scheduling pass. */
  private tick(): void {
    const now = Date.now();
    const sched = this.scheduler;
    this.agents.tick(now);
    this.drivers.tick(now);
    this.recovery.tick(now);
    this.auth.sweep(now);
    if (!this.recovery.active) this.executors.dropGoneRoutes((route) => this.auth.forget(route));
    sched.deadlines.check(now, this.agentTimeoutMs);
    sched.shrinkIdle(now);
    this.objects.expire(now);
    sched.schedule();
  }

  /** Drivers of an app heard from within the driver timeout. */
  liveDrivers(app: AppRecord, now = Date.now()): number {
    return this.drivers.liveDrivers(app, now);
  }

  /** Keep-alive deadline of an app, or undefined while a driver is attached. */
  releaseAt(app: AppRecord): number | undefined {
    return this.drivers.releaseAt(app);
  }
}

function printable(id: Buffer): string {
  const s = id.toString();
  return /^[\x20-\x7e]+$/.test(s) ? s : `0x${id.toString("hex")}`;
}
