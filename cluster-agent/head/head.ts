/**
 * The head process: one ROUTER socket that drivers, agents and executors
 * connect to. It keeps the registry (agents, apps, services, executors),
 * delegates scheduling to Scheduler, tracks liveness and keep-alive, and
 * answers every malformed message with an error instead of crashing.
 */
import { randomUUID } from "node:crypto";
import { RouterChannel } from "../../sdk/wire/channel.js";
import { MESSAGE_LIMIT, decodeHeader, encode, messageSize, num, obj, optNum, str, type Header } from "../../sdk/wire/codec.js";
import { MessageTooLargeError, ProtocolError, fromWireError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import { truncateLogLine } from "../../sdk/format.js";
import { AgentRequestError, ClosedError, ExecutorNotFoundError, QueueFullError, ServiceNotFoundError } from "../../sdk/errors/index.js";
import os from "node:os";
import { ObjectService, type ServiceReply } from "../object-service.js";
import { isServing } from "./call-router.js";
import { ObjectStore } from "./object-store.js";
import type { AgentRecord, AppRecord } from "./records.js";
import { Scheduler } from "./scheduler.js";
import { parseServiceSpec, SERVICE_LIMITS } from "./spec.js";
import { buildStatus } from "./status.js";
import { StateFile } from "./persist.js";
import { Recovery } from "./recovery.js";
import { startZapHandler, type CurveKeys } from "../../sdk/wire/curve.js";
import { Authenticator, type Peer } from "../../sdk/wire/authenticator.js";
import { ensureSecret, secretFile } from "../../sdk/wire/auth.js";
import { AuthError } from "../../sdk/wire/errors.js";
import { PEER_LIMITS, admitPeer, peerKey, type PeerLimits } from "./peer-roles.js";
import { SUSPECT_AGENT_TIMEOUT_MS, onExecutorMessage, type ExecutorPeerHost } from "./executor-protocol.js";

export { SUSPECT_AGENT_TIMEOUT_MS };

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
  /** Log sink; default stderr with a timestamp. */
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
}

/** A running head. Create with `Head.start()`. */
export class Head {
  readonly id = randomUUID();
  readonly startedAt = Date.now();
  readonly scheduler: Scheduler;
  readonly objects: ObjectService;
  private readonly channel: RouterChannel;
  private readonly keepAliveMs: number;
  private readonly driverTimeoutMs: number;
  private readonly agentTimeoutMs: number;
  private readonly maxKeepAliveMs: number;
  private readonly maxApps: number;
  private readonly log: (line: string) => void;
  private ticker?: NodeJS.Timeout;
  private serving?: Promise<void>;
  private nextRid = 1;
  private readonly agentReplies = new Map<number, { resolve: (v: Header) => void; reject: (e: Error) => void; timer: NodeJS.Timeout; op: string }>();
  private closed = false;
  private onShutdown: () => void = () => {};
  private stopZap?: () => void;
  /** Binds routing ids to proven credentials; every message passes it first (peer-roles.ts says who may do what). */
  private auth!: Authenticator;
  /** Where each executor's proven connection is (its routing id is random, never `x.<id>`). */
  private readonly executorRoutes = new Map<string, Buffer>();
  /** The runtime state file, with a data dir. */
  private state?: StateFile;
  /** Restoring apps and services, and adopting reported executors, after a restart. */
  readonly recovery: Recovery;
  /** The concrete endpoint after binding. */
  endpoint = "";
  /** Counters for status and tests. */
  readonly stats = { messages: 0, malformed: 0 };

  private constructor(opts: HeadOptions) {
    this.keepAliveMs = opts.keepAliveMs ?? 30 * 60_000;
    this.driverTimeoutMs = opts.driverTimeoutMs ?? 5_000;
    this.agentTimeoutMs = opts.agentTimeoutMs ?? 6_000;
    this.maxKeepAliveMs = opts.maxKeepAliveMs ?? Math.max(24 * 3_600_000, this.keepAliveMs);
    this.maxApps = opts.maxApps ?? 1000;
    const sink = opts.log ?? ((line: string) => process.stderr.write(`${new Date().toISOString()} head ${line}\n`));
    this.log = (line) => sink(truncateLogLine(line));
    this.channel = new RouterChannel({
      maxMessageSize: 64 * 1024 * 1024,
      onError: (err) => this.log(`socket error: ${String(err)}`),
      onRefused: (id, frames, err) => this.onRefusedMessage(id, frames, err),
      curveServerSecretKey: opts.curve?.serverSecretKey,
    });
    this.objects = new ObjectService(new ObjectStore({ memLimit: opts.memLimit ?? Math.floor(os.totalmem() / 2), dataDir: opts.dataDir }));
    this.scheduler = new Scheduler({
      toDriver: (id, frames) => this.channel.sendTo(id, frames),
      toAgent: (agent, frames) => this.channel.sendTo(agent.routingId, frames),
      toExecutor: (id, frames) => {
        const route = this.executorRoutes.get(id);
        if (route) this.channel.sendTo(route, frames);
      },
      reservePort: (agent) => this.reservePort(agent),
      log: (m) => this.log(m),
      saveState: () => this.state?.save(),
    });
    this.recovery = new Recovery(this.scheduler, (agent, frames) => this.channel.sendTo(agent.routingId, frames), (m) => this.log(m));
  }

  /** Binds, starts serving, and returns the head. */
  static async start(opts: HeadOptions = {}): Promise<Head> {
    const head = new Head(opts);
    head.objects.store.open();
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
        if (peer.role === "executor") head.executorRoutes.set(peer.id, peer.routingId);
      },
      log: (m) => head.log(m),
    });
    if (opts.curve) head.stopZap = await startZapHandler([opts.curve.publicKey], (address) => head.log(`refused a connection from ${address}: unknown CURVE key`));
    head.endpoint = await head.channel.bind(opts.bind ?? "tcp://127.0.0.1:0");
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
    for (const app of [...this.scheduler.apps.values()]) this.releaseApp(app, "the head is shutting down");
    for (const agent of this.scheduler.agents.values()) this.channel.sendTo(agent.routingId, [encode({ t: "bye" })]);
    await this.channel.flush();
    await new Promise((r) => setTimeout(r, 100));
    this.channel.close();
    this.stopZap?.();
    await this.serving;
    this.onShutdown();
  }

  private onMessage(peer: Peer, frames: Buffer[]): void {
    this.stats.messages++;
    const id = peer.routingId;
    let h: Header | undefined;
    try {
      h = decodeHeader(frames[0]);
      // The role and identity the peer proved at the handshake, never what its routing id looks like.
      if (peer.role === "agent") this.onAgentMessage(id, peer.id, h, frames);
      else if (peer.role === "executor") onExecutorMessage(this.executorHost, id, peer, h, frames);
      else this.onDriverMessage(id, h, frames, peer);
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

  // ---- drivers -------------------------------------------------------------

  private onDriverMessage(id: Buffer, h: Header, frames: Buffer[], peer: Peer): void {
    const key = id.toString("hex");
    if (h.t === "hb") {
      const app = this.appOf(key);
      if (app) this.seen(app, key);
      this.channel.sendTo(id, [encode({ t: "hb", head: this.id })]);
      return;
    }
    if (h.t === "cancel") {
      this.scheduler.cancelCall(id, num(h, "cid"));
      return;
    }
    if (h.t === "call") {
      const app = this.requireApp(key);
      this.seen(app, key);
      const cid = num(h, "cid");
      if (this.scheduler.router.isReplay(id, cid)) return;
      const size = messageSize(frames);
      const serviceId = str(h, "svc");
      const s = this.scheduler.services.get(serviceId);
      if (size > MESSAGE_LIMIT) return this.failCall(id, cid, toWireError(new MessageTooLargeError(size, MESSAGE_LIMIT, "call arguments")));
      if (!s || s.app !== app.name) return this.failCall(id, cid, toWireError(new ServiceNotFoundError(`no service with id '${serviceId}' in app '${app.name}'`, { service: serviceId, app: app.name })));
      if (s.state === "failed" || s.state === "stopped") return this.failCall(id, cid, s.error ?? toWireError(new ClosedError(`service '${s.spec.name}' was stopped`, { service: s.spec.name })));
      const rank = optNum(h, "rank");
      if (s.kind === "gang" && (rank === undefined || !Number.isInteger(rank) || rank < 0 || rank >= s.spec.warmup)) {
        return this.failCall(id, cid, toWireError(new ProtocolError(`gang '${s.spec.name}' has ranks 0..${s.spec.warmup - 1}; got rank ${String(rank)}`)));
      }
      // A pool call may name one executor (to reach every member, e.g. for digests): it waits for that one only.
      const exe = typeof h.exe === "string" ? h.exe : undefined;
      if (exe !== undefined && (s.kind !== "pool" || !s.executors.has(exe))) {
        return this.failCall(id, cid, toWireError(new ExecutorNotFoundError(`service '${s.spec.name}' has no executor '${exe}' (list them with members())`, { service: s.spec.name, executorId: exe })));
      }
      if (frames.length !== 2) throw new ProtocolError("'call' message needs exactly one payload frame (msgpack args array)");
      const timeoutMs = optNum(h, "timeoutMs") ?? s.spec.callTimeoutMs ?? undefined;
      if (timeoutMs !== undefined && !(timeoutMs > 0 && timeoutMs <= SERVICE_LIMITS.timeoutMs)) {
        return this.failCall(id, cid, toWireError(new ProtocolError(`call timeoutMs must be a positive number of milliseconds (at most ${SERVICE_LIMITS.timeoutMs}); got ${timeoutMs}`)));
      }
      if (s.queue.length >= s.spec.maxQueued) {
        return this.failCall(id, cid, toWireError(new QueueFullError(
          `service '${s.spec.name}' already has ${s.queue.length} calls queued (its maxQueued); wait for results before sending more (pool.map keeps a bounded window), or declare it with a larger maxQueued`,
          { service: s.spec.name, limit: s.spec.maxQueued },
        )));
      }
      this.scheduler.router.submit(s, id, cid, str(h, "method"), frames[1]!, s.kind === "gang" ? rank : undefined, timeoutMs, exe);
      this.scheduler.onCallsChanged(s);
      return;
    }
    if (h.t !== "req") throw new ProtocolError(`unknown message type '${h.t}' from a driver`);
    const rid = num(h, "rid");
    const op = str(h, "op");
    if (op.startsWith("obj-")) {
      const app = this.requireApp(key);
      this.seen(app, key);
      return this.answerObject(id, rid, () => this.objects.handle(op, app.name, h, frames, "driver"));
    }
    try {
      const value = this.onDriverRequest(id, key, op, h, rid, peer);
      if (value !== DEFERRED) this.channel.sendTo(id, [encode({ t: "rep", rid, ok: true, value, head: this.id })]);
    } catch (err) {
      const error = toWireError(err);
      this.channel.sendTo(id, [encode({ t: "rep", rid, ok: false, error, head: this.id })]);
    }
  }

  private onDriverRequest(id: Buffer, key: string, op: string, h: Header, rid: number, peer: Peer): unknown {
    const sched = this.scheduler;
    const admin = peer.role === "admin";
    switch (op) {
      case "hello": {
        const name = str(h, "app");
        if (!admin && name !== peer.app) throw new AuthError(`this connection proved a credential for app '${peer.app}', not '${name}'; open '${name}' with its own app token`);
        if (!/^[A-Za-z0-9_.-]{1,128}$/.test(name)) {
          throw new ProtocolError(`app name '${name}' must be 1-128 characters of letters, digits, '_', '.', '-'`);
        }
        let app = sched.apps.get(name);
        const reattached = app !== undefined;
        const asked = optNum(h, "keepAliveMs");
        if (asked !== undefined && !(asked >= 0)) throw new ProtocolError(`keepAliveMs must be a non-negative number of milliseconds; got ${asked}`);
        const keepAliveMs = Math.min(asked ?? this.keepAliveMs, this.maxKeepAliveMs);
        if (!app) {
          if (sched.apps.size >= this.maxApps) {
            throw new ProtocolError(`the head holds its maximum of ${this.maxApps} apps; close apps you no longer need (app.close(), or \`hearth status\` to see them) or start the head with a larger --max-apps`);
          }
          app = { name, keepAliveMs, drivers: new Map(), services: new Map(), createdAt: Date.now() };
          sched.apps.set(name, app);
          this.log(`app '${name}' created`);
          this.state?.save();
        } else if (asked !== undefined && app.keepAliveMs !== keepAliveMs) {
          app.keepAliveMs = keepAliveMs;
          this.state?.save();
        }
        for (const other of sched.apps.values()) other.drivers.delete(key);
        this.seen(app, key);
        return {
          app: name,
          reattached,
          headId: this.id,
          endpoint: this.endpoint,
          keepAliveMs: app.keepAliveMs,
          services: [...app.services.values()].map((s) => sched.serviceInfo(s)),
        };
      }
      case "status": {
        const which = h.all === true ? undefined : (optStrField(h, "app") ?? this.appOf(key)?.name);
        if (!admin && which !== peer.app) throw new AuthError("the status of other apps (or of all) needs the admin credential (the cluster secret under HEARTH_HOME)");
        return buildStatus(this, which);
      }
      case "shutdown":
        if (!admin) throw new AuthError("shutting the head down needs the admin credential (the cluster secret under HEARTH_HOME)");
        setImmediate(() => void this.close());
        return { stopping: true };
    }
    const app = this.requireApp(key);
    this.seen(app, key);
    switch (op) {
      case "service": {
        const spec = parseServiceSpec(obj(h, "spec"));
        const s = sched.declare(app, spec, h.replace === true);
        return sched.serviceInfo(s);
      }
      case "ready": {
        const s = this.serviceOf(app, str(h, "service"));
        const timeoutMs = optNum(h, "timeoutMs");
        if (timeoutMs !== undefined && !(timeoutMs > 0)) throw new ProtocolError(`ready timeoutMs must be a positive number of milliseconds; got ${timeoutMs}`);
        sched.awaitReady(s, id, rid, timeoutMs);
        return DEFERRED;
      }
      case "members": {
        const s = this.serviceOf(app, str(h, "service"));
        const members = [...s.executors.values()]
          .filter(isServing)
          .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
          .map((e) => ({ executorId: e.id, agentId: e.agentId, state: e.state, pid: e.pid ?? null, gpus: e.gpus }));
        return { members };
      }
      case "stop-service": {
        const s = this.serviceOf(app, str(h, "service"));
        sched.stopService(s, `service '${s.spec.name}' was stopped by the driver`);
        return { stopped: s.spec.name };
      }
      case "detach":
        app.drivers.delete(key);
        if (app.drivers.size === 0) app.goneSince = Date.now();
        return { detached: true, keepAliveMs: app.keepAliveMs };
      case "close-app":
        this.releaseApp(app, `app '${app.name}' was closed by its driver`);
        return { closed: app.name };
      default:
        throw new ProtocolError(`unknown request op '${op}'`);
    }
  }

  /** What the executor protocol (executor-protocol.ts) may use of this head. */
  private readonly executorHost: ExecutorPeerHost = ((self: Head) => ({
    id: self.id,
    get scheduler() { return self.scheduler; },
    get recovery() { return self.recovery; },
    get objects() { return self.objects; },
    sendTo: (route: Buffer, frames: Buffer[]) => self.channel.sendTo(route, frames),
    log: (line: string) => self.log(line),
    answerObject: (route: Buffer, rid: number, work: () => ServiceReply) => self.answerObject(route, rid, work),
  }))(this);

  private answerObject(id: Buffer, rid: number, work: () => ServiceReply): void {
    try {
      const r = work();
      this.channel.sendTo(id, [encode({ t: "rep", rid, ok: true, value: r.value, head: this.id }), ...(r.frames ?? [])]);
    } catch (err) {
      this.channel.sendTo(id, [encode({ t: "rep", rid, ok: false, error: toWireError(err), head: this.id })]);
    }
  }

  private serviceOf(app: AppRecord, name: string) {
    const s = app.services.get(name) ?? [...app.services.values()].find((x) => x.id === name);
    if (!s) throw new ServiceNotFoundError(`no service named '${name}' in app '${app.name}'`, { service: name, app: app.name });
    return s;
  }

  private failCall(id: Buffer, cid: number, error: WireError): void {
    this.scheduler.router.remember(id, cid);
    this.channel.sendTo(id, [encode({ t: "failed", cid, error })]);
  }

  private appOf(key: string): AppRecord | undefined {
    for (const app of this.scheduler.apps.values()) if (app.drivers.has(key)) return app;
    return undefined;
  }

  private requireApp(key: string): AppRecord {
    const app = this.appOf(key);
    if (!app) throw new ProtocolError("this driver has not said hello (or its app was released); send a 'hello' request first");
    return app;
  }

  private seen(app: AppRecord, key: string): void {
    app.drivers.set(key, Date.now());
    app.goneSince = undefined;
  }

  private releaseApp(app: AppRecord, reason: string): void {
    for (const s of [...app.services.values()]) this.scheduler.stopService(s, reason);
    this.scheduler.apps.delete(app.name);
    this.state?.save();
    this.log(`app '${app.name}' released: ${reason}`);
  }

  // ---- agents and executors ------------------------------------------------

  private onAgentMessage(id: Buffer, agentId: string, h: Header, frames: Buffer[]): void {
    const sched = this.scheduler;
    if (h.t === "rep") {
      const pending = this.agentReplies.get(num(h, "rid"));
      if (!pending) return;
      this.agentReplies.delete(num(h, "rid"));
      clearTimeout(pending.timer);
      if (h.ok === true) pending.resolve(h);
      else pending.reject(new AgentRequestError(`agent ${agentId} failed '${pending.op}': ${String((h.error as WireError | undefined)?.message ?? "no reason given")}`, { agentId, op: pending.op, cause: h.error ? fromWireError(h.error as WireError) : undefined }));
      return;
    }
    if (h.t === "register") {
      const old = sched.agents.get(agentId);
      if (old && old.pid === h.pid && old.host === h.host) {
        // The same agent process again (it answered several queued `reregister`s): it is already registered.
        old.lastSeen = Date.now();
        this.channel.sendTo(id, [encode({ t: "registered", headId: this.id })]);
        return;
      }
      if (old) sched.onAgentLost(old);
      const gpus = Array.isArray(h.gpus) ? h.gpus.map(String) : [];
      const total = { cpu: num(h, "cpu"), mem: num(h, "mem"), gpus };
      const agent: AgentRecord = {
        id: agentId,
        routingId: Buffer.from(id),
        host: str(h, "host"),
        pid: num(h, "pid"),
        total,
        free: { cpu: total.cpu, mem: total.mem, gpus: [...gpus] },
        lastSeen: Date.now(),
        executors: new Set(),
        labels: (h.labels as Record<string, string> | undefined) ?? {},
      };
      sched.agents.set(agentId, agent);
      this.log(`agent ${agentId} registered: host ${agent.host}, cpu ${total.cpu}, mem ${total.mem}, gpus [${gpus.join(",")}]`);
      // Its live executors (after a head restart): adopted into restored services, or stopped.
      this.recovery.adopt(agent, h.executors);
      this.channel.sendTo(id, [encode({ t: "registered", headId: this.id })]);
      sched.schedule();
      return;
    }
    const agent = sched.agents.get(agentId);
    if (!agent) {
      // A head restart or a lost agent: ask it to register afresh.
      this.channel.sendTo(id, [encode({ t: "reregister" })]);
      return;
    }
    agent.lastSeen = Date.now();
    if (h.t === "hb") {
      // Answered so the agent can tell its head is alive (and exit after a grace period when it is not).
      this.channel.sendTo(id, [encode({ t: "hb", head: this.id })]);
      return;
    }
    if (h.t === "req") {
      const op = str(h, "op");
      if (!op.startsWith("obj-")) throw new ProtocolError(`unknown request op '${op}' from an agent`);
      const ns = typeof h.app === "string" ? h.app : "";
      return this.answerObject(id, num(h, "rid"), () => this.objects.handle(op, ns, h, frames, "agent"));
    }
    if ((h.t === "start-failed" || h.t === "exit") && !this.reportsOwn(agent, str(h, "executor"))) {
      throw new AuthError(`agent ${agentId} reported '${h.t}' for executor ${str(h, "executor")}, which runs on another agent; ignored`);
    }
    if (h.t === "start-failed") {
      const executor = str(h, "executor");
      sched.onExecutorInitFailed(executor, obj(h, "error") as unknown as WireError);
      sched.onExecutorExit(executor, null, null, "never started");
      return;
    }
    if (h.t === "exit") {
      const detail = typeof h.detail === "string" ? h.detail : "";
      sched.onExecutorExit(str(h, "executor"), (h.code as number | null) ?? null, (h.signal as string | null) ?? null, detail);
      return;
    }
    throw new ProtocolError(`unknown message type '${h.t}' from an agent`);
  }

  /** True when `executorId` is one the head placed on `agent` (or one it does not know, whose report changes nothing). */
  private reportsOwn(agent: AgentRecord, executorId: string): boolean {
    const e = this.scheduler.executors.get(executorId) ?? this.scheduler.draining.get(executorId);
    return e === undefined || e.agentId === agent.id;
  }

  private reservePort(agent: AgentRecord): Promise<number> {
    const rid = this.nextRid++;
    return new Promise<Header>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.agentReplies.delete(rid);
        reject(new AgentRequestError(`agent ${agent.id} did not answer 'reserve-port' within 10 s`, { agentId: agent.id, op: "reserve-port" }));
      }, 10_000);
      this.agentReplies.set(rid, { resolve, reject, timer, op: "reserve-port" });
      this.channel.sendTo(agent.routingId, [encode({ t: "req", rid, op: "reserve-port" })]);
    }).then((h) => num(h, "port"));
  }

  // ---- liveness --------------------------------------------------------------

  private tick(): void {
    const now = Date.now();
    const sched = this.scheduler;
    for (const agent of [...sched.agents.values()]) {
      const suspect = agent.suspectSince !== undefined;
      if (now - agent.lastSeen > (suspect ? Math.min(SUSPECT_AGENT_TIMEOUT_MS, this.agentTimeoutMs) : this.agentTimeoutMs)) {
        this.log(`agent ${agent.id} lost: no heartbeat for ${now - agent.lastSeen} ms${suspect ? " (its executors reported it gone)" : ""}`);
        sched.onAgentLost(agent);
      } else if (suspect && agent.lastSeen > agent.suspectSince! + SUSPECT_AGENT_TIMEOUT_MS) {
        agent.suspectSince = undefined; // it kept heartbeating: the report was wrong
      }
    }
    for (const app of [...sched.apps.values()]) {
      // A silent driver (busy, or gone) stays a member of its app: it can carry on when it speaks
      // again. Only the keep-alive clock cares whether any driver was heard from recently.
      if (this.liveDrivers(app, now) > 0) {
        app.goneSince = undefined;
        continue;
      }
      app.goneSince ??= now;
      if (now - app.goneSince >= app.keepAliveMs) {
        this.releaseApp(app, `no driver for ${Math.round((now - app.goneSince) / 1000)} s (keep-alive ${app.keepAliveMs / 1000} s)`);
      }
    }
    this.recovery.tick(now);
    this.auth.sweep(now);
    if (!this.recovery.active) this.dropGoneExecutorRoutes();
    sched.deadlines.check(now, this.agentTimeoutMs);
    sched.shrinkIdle(now);
    this.objects.expire(now);
    sched.schedule();
  }

  /** Forgets the connections of executors the head no longer tracks (a late one re-proves itself and is told to exit). */
  private dropGoneExecutorRoutes(): void {
    const sched = this.scheduler;
    for (const [id, route] of this.executorRoutes) {
      if (sched.executors.has(id) || sched.draining.has(id)) continue;
      this.executorRoutes.delete(id);
      this.auth.forget(route);
    }
  }

  /** Drivers of an app heard from within the driver timeout. */
  liveDrivers(app: AppRecord, now = Date.now()): number {
    let n = 0;
    for (const last of app.drivers.values()) if (now - last <= this.driverTimeoutMs) n++;
    return n;
  }

  /** Keep-alive deadline of an app, or undefined while a driver is attached. */
  releaseAt(app: AppRecord): number | undefined {
    return app.goneSince === undefined ? undefined : app.goneSince + app.keepAliveMs;
  }
}

const DEFERRED = Symbol("deferred");

/**
 * How long an agent that one of its executors reported gone may stay silent
 * before it is lost (agents heartbeat every second; the usual agent timeout is
 * 6 s). A live agent keeps heartbeating, so a wrong report costs nothing.
 */

function optStrField(h: Header, field: string): string | undefined {
  return typeof h[field] === "string" ? (h[field] as string) : undefined;
}

function printable(id: Buffer): string {
  const s = id.toString();
  return /^[\x20-\x7e]+$/.test(s) ? s : `0x${id.toString("hex")}`;
}
