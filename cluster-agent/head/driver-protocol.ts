/**
 * The head's side of the driver protocol: what a driver (or the admin) that
 * proved its credential may send — heartbeats, `hello` to open or reattach
 * to its app, calls and their cancellation, service declarations, readiness
 * waits, members, stops, object requests, status, the agents' capacity
 * (before any app is opened) and shutdown — and driver
 * liveness: a driver heard from recently keeps its app warm; an app with no
 * live driver is released after its keep-alive.
 */
import { MESSAGE_LIMIT, encode, messageSize, num, obj, optNum, str, type Header } from "../../sdk/wire/codec.js";
import { AuthError, MessageTooLargeError, ProtocolError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import { ClosedError, QueueFullError, ServiceNotFoundError } from "../../sdk/errors/index.js";
import type { Peer } from "../../sdk/wire/authenticator.js";
import { isServing } from "./call-router.js";
import { answerObject, type HeadContext } from "./head-context.js";
import type { AppRecord } from "./records.js";
import { parseServiceSpec, SERVICE_LIMITS } from "./spec.js";
import type { StatusOptions } from "./status.js";

/** What the driver protocol needs beyond the common context. */
export interface DriverContext extends HeadContext {
  /** The head's bound endpoint (told to drivers in `hello`). */
  readonly endpoint: string;
  /** The status document of one app, or of every app when `appName` is undefined (status.ts). */
  status(appName: string | undefined, opts?: StatusOptions): Record<string, unknown>;
  /** Counts an app this head created (`head.appsCreated` in the status: a refusal "before any app exists" is checked against it). */
  appCreated(): void;
  /** Shuts the head down (after the reply to `shutdown` is sent). */
  shutdown(): void;
}

/** Driver settings (HeadOptions has their defaults). */
export interface DriverLimits {
  /** How long an app stays warm after its last driver is gone, unless its `hello` asked otherwise. */
  keepAliveMs: number;
  /** The longest keep-alive a `hello` may ask for. */
  maxKeepAliveMs: number;
  /** A driver silent for this long no longer keeps its app warm. */
  driverTimeoutMs: number;
  /** Apps the head holds at most. */
  maxApps: number;
}

/** Drivers and their apps: messages from proven drivers, and the keep-alive clock. */
export class DriverProtocol {
  constructor(
    private readonly ctx: DriverContext,
    private readonly limits: DriverLimits,
  ) {}

  /** Handles one message from a proven driver or admin. */
  onMessage(id: Buffer, peer: Peer, h: Header, frames: Buffer[]): void {
    const key = id.toString("hex");
    if (h.t === "hb") {
      const app = this.appOf(key);
      if (app) this.seen(app, key);
      this.ctx.sendTo(id, [encode({ t: "hb", head: this.ctx.id })]);
      return;
    }
    if (h.t === "cancel") {
      this.ctx.scheduler.cancelCall(id, num(h, "cid"));
      return;
    }
    if (h.t === "call") return this.onCall(id, key, h, frames);
    if (h.t !== "req") throw new ProtocolError(`unknown message type '${h.t}' from a driver`);
    const rid = num(h, "rid");
    const op = str(h, "op");
    if (op.startsWith("obj-")) {
      const app = this.requireApp(key);
      this.seen(app, key);
      return answerObject(this.ctx, id, rid, () => this.ctx.objects.serve(op, app.name, h, frames, "driver", id.toString("latin1")));
    }
    try {
      const value = this.onRequest(id, key, op, h, rid, peer);
      if (value !== DEFERRED) this.ctx.sendTo(id, [encode({ t: "rep", rid, ok: true, value, head: this.ctx.id })]);
    } catch (err) {
      const error = toWireError(err);
      this.ctx.sendTo(id, [encode({ t: "rep", rid, ok: false, error, head: this.ctx.id })]);
    }
  }

  private onCall(id: Buffer, key: string, h: Header, frames: Buffer[]): void {
    const sched = this.ctx.scheduler;
    const app = this.requireApp(key);
    this.seen(app, key);
    const cid = num(h, "cid");
    if (sched.router.isReplay(id, cid)) return;
    const size = messageSize(frames);
    const serviceId = str(h, "svc");
    const s = sched.services.get(serviceId);
    if (size > MESSAGE_LIMIT) return this.failCall(id, cid, toWireError(new MessageTooLargeError(size, MESSAGE_LIMIT, "call arguments")));
    if (!s || s.app !== app.name) return this.failCall(id, cid, toWireError(new ServiceNotFoundError(`no service with id '${serviceId}' in app '${app.name}'`, { service: serviceId, app: app.name })));
    if (s.state === "failed" || s.state === "stopped") return this.failCall(id, cid, s.error ?? toWireError(new ClosedError(`service '${s.spec.name}' was stopped`, { service: s.spec.name })));
    // A gang call names its rank; a pool call may name one executor (to reach every member, e.g. for digests).
    const address = sched.policyFor(s).addressCall(s, optNum(h, "rank"), typeof h.exe === "string" ? h.exe : undefined);
    if ("error" in address) return this.failCall(id, cid, address.error);
    if (frames.length !== 2) throw new ProtocolError("'call' message needs exactly one payload frame (msgpack args array)");
    const timeoutMs = optNum(h, "timeoutMs") ?? s.spec.callTimeoutMs ?? undefined;
    if (timeoutMs !== undefined && !(timeoutMs > 0 && timeoutMs <= SERVICE_LIMITS.timeoutMs)) {
      return this.failCall(id, cid, toWireError(new ProtocolError(`call timeoutMs must be a positive number of milliseconds (at most ${SERVICE_LIMITS.timeoutMs}); got ${timeoutMs}`)));
    }
    if (s.queue.length >= s.spec.maxQueued) {
      return this.failCall(
        id,
        cid,
        toWireError(
          new QueueFullError(
            `service '${s.spec.name}' already has ${s.queue.length} calls queued (its maxQueued); wait for results before sending more (pool.map keeps a bounded window), or declare it with a larger maxQueued`,
            { service: s.spec.name, limit: s.spec.maxQueued },
          ),
        ),
      );
    }
    sched.router.submit(s, id, cid, str(h, "method"), frames[1]!, address.rank, timeoutMs, address.target);
    sched.onCallsChanged(s);
  }

  private onRequest(id: Buffer, key: string, op: string, h: Header, rid: number, peer: Peer): unknown {
    const sched = this.ctx.scheduler;
    const admin = peer.role === "admin";
    switch (op) {
      case "hello":
        return this.hello(key, h, peer, admin);
      case "status": {
        const which = h.all === true ? undefined : (optStrField(h, "app") ?? this.appOf(key)?.name);
        if (!admin && which !== peer.app) throw new AuthError("the status of other apps (or of all) needs the admin credential (the cluster secret under HEARTH_HOME)");
        const keys = optNum(h, "keys");
        return this.ctx.status(which, { keys: keys === undefined ? undefined : Math.max(0, Math.min(10_000, Math.floor(keys))) });
      }
      case "capacity":
        // What each agent has, asked before any app is opened (a driver checks its resources fit before it creates one).
        return {
          agents: [...sched.agents.values()].map((a) => ({ id: a.id, total: { cpu: a.total.cpu, mem: a.total.mem, gpus: a.total.gpus.length }, free: { cpu: a.free.cpu, mem: a.free.mem, gpus: a.free.gpus.length } })),
        };
      case "shutdown":
        if (!admin) throw new AuthError("shutting the head down needs the admin credential (the cluster secret under HEARTH_HOME)");
        setImmediate(() => this.ctx.shutdown());
        return { stopping: true };
    }
    const app = this.requireApp(key);
    this.seen(app, key);
    switch (op) {
      case "service": {
        const spec = parseServiceSpec(obj(h, "spec"));
        const s = sched.lifecycle.declare(app, spec, h.replace === true);
        return sched.lifecycle.serviceInfo(s);
      }
      case "ready": {
        const s = serviceOf(app, str(h, "service"));
        const timeoutMs = optNum(h, "timeoutMs");
        if (timeoutMs !== undefined && !(timeoutMs > 0)) throw new ProtocolError(`ready timeoutMs must be a positive number of milliseconds; got ${timeoutMs}`);
        sched.lifecycle.awaitReady(s, id, rid, timeoutMs);
        return DEFERRED;
      }
      case "members": {
        const s = serviceOf(app, str(h, "service"));
        const members = [...s.executors.values()]
          .filter(isServing)
          .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
          .map((e) => ({ executorId: e.id, agentId: e.agentId, state: e.state, pid: e.pid ?? null, gpus: e.gpus }));
        return { members };
      }
      case "stop-service": {
        const s = serviceOf(app, str(h, "service"));
        sched.lifecycle.stopService(s, `service '${s.spec.name}' was stopped by the driver`);
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

  /** Opens (or reattaches to) the app the driver's credential names; an admin may open any. */
  private hello(key: string, h: Header, peer: Peer, admin: boolean): unknown {
    const sched = this.ctx.scheduler;
    const name = str(h, "app");
    if (!admin && name !== peer.app) throw new AuthError(`this connection proved a credential for app '${peer.app}', not '${name}'; open '${name}' with its own app token`);
    if (!/^[A-Za-z0-9_.-]{1,128}$/.test(name)) {
      throw new ProtocolError(`app name '${name}' must be 1-128 characters of letters, digits, '_', '.', '-'`);
    }
    let app = sched.apps.get(name);
    const reattached = app !== undefined;
    const asked = optNum(h, "keepAliveMs");
    if (asked !== undefined && !(asked >= 0)) throw new ProtocolError(`keepAliveMs must be a non-negative number of milliseconds; got ${asked}`);
    const keepAliveMs = Math.min(asked ?? this.limits.keepAliveMs, this.limits.maxKeepAliveMs);
    if (!app) {
      if (sched.apps.size >= this.limits.maxApps) {
        throw new ProtocolError(`the head holds its maximum of ${this.limits.maxApps} apps; close apps you no longer need (app.close(), or \`hearth status\` to see them) or start the head with a larger --max-apps`);
      }
      app = { name, keepAliveMs, drivers: new Map(), services: new Map(), createdAt: Date.now() };
      sched.apps.set(name, app);
      this.ctx.appCreated();
      this.ctx.log(`app '${name}' created`);
      this.ctx.saveState();
    } else if (asked !== undefined && app.keepAliveMs !== keepAliveMs) {
      app.keepAliveMs = keepAliveMs;
      this.ctx.saveState();
    }
    for (const other of sched.apps.values()) other.drivers.delete(key);
    this.seen(app, key);
    return {
      app: name,
      reattached,
      headId: this.ctx.id,
      endpoint: this.ctx.endpoint,
      keepAliveMs: app.keepAliveMs,
      services: [...app.services.values()].map((s) => sched.lifecycle.serviceInfo(s)),
    };
  }

  private failCall(id: Buffer, cid: number, error: WireError): void {
    this.ctx.scheduler.router.remember(id, cid);
    this.ctx.sendTo(id, [encode({ t: "failed", cid, error })]);
  }

  private appOf(key: string): AppRecord | undefined {
    for (const app of this.ctx.scheduler.apps.values()) if (app.drivers.has(key)) return app;
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

  /** Stops every service of an app and forgets it. */
  releaseApp(app: AppRecord, reason: string): void {
    for (const s of [...app.services.values()]) this.ctx.scheduler.lifecycle.stopService(s, reason);
    this.ctx.scheduler.apps.delete(app.name);
    this.ctx.saveState();
    const scratch = this.ctx.objects.releaseApp(app.name);
    this.ctx.log(`app '${app.name}' released: ${reason}${scratch > 0 ? `; ${scratch} scratch object(s) deleted` : ""}`);
  }

  /** Releases every app (the head is shutting down). */
  releaseAll(reason: string): void {
    for (const app of [...this.ctx.scheduler.apps.values()]) this.releaseApp(app, reason);
  }

  /**
   * Driver liveness, on the head's tick: an app with no driver heard from
   * within the driver timeout starts its keep-alive clock, and is released
   * when that runs out.
   */
  tick(now: number): void {
    for (const app of [...this.ctx.scheduler.apps.values()]) {
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
  }

  /** Drivers of an app heard from within the driver timeout. */
  liveDrivers(app: AppRecord, now = Date.now()): number {
    let n = 0;
    for (const last of app.drivers.values()) if (now - last <= this.limits.driverTimeoutMs) n++;
    return n;
  }

  /** Keep-alive deadline of an app, or undefined while a driver is attached. */
  releaseAt(app: AppRecord): number | undefined {
    return app.goneSince === undefined ? undefined : app.goneSince + app.keepAliveMs;
  }
}

/** A request answered later (a `ready` wait), not by the return value. */
const DEFERRED = Symbol("deferred");

function serviceOf(app: AppRecord, name: string) {
  const s = app.services.get(name) ?? [...app.services.values()].find((x) => x.id === name);
  if (!s) throw new ServiceNotFoundError(`no service named '${name}' in app '${app.name}'`, { service: name, app: app.name });
  return s;
}

function optStrField(h: Header, field: string): string | undefined {
  return typeof h[field] === "string" ? (h[field] as string) : undefined;
}
