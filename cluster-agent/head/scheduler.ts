/**
 * The head's scheduler: declares services, places executors on agents
 * (pools one at a time, gangs all together or not at all), grows pools while
 * calls pend, shrinks them when idle, and reacts to executors that become
 * ready, fail to start or die.
 */
import { encode } from "../../sdk/wire/codec.js";
import type { Frames } from "../../sdk/wire/channel.js";
import { ClosedError, ExecutorLostError, GangFailedError, ResreqError, ServiceConfigError, ServiceStartError } from "../../sdk/errors/index.js";
import { fromWireError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import { formatResources } from "../../sdk/runtime/resreq.js";
import { CallRouter, isServing, liveExecutors } from "./call-router.js";

export { liveExecutors };
import { Deadlines } from "./deadlines.js";
import { IdCounter } from "./ids.js";
import { newServiceRecord, type AgentRecord, type AppRecord, type CallRecord, type ExecutorRecord, type ServiceRecord, type ServiceSpec } from "./records.js";
import { agentAccepts, everFitsGang, everFitsOne, give, placeMany, placeOne, take, type Placement } from "./placement.js";

/** How many executors of a service may die while starting, in a row, before it fails. */
export const MAX_START_FAILURES = 3;
/** How long an executor gets to run `close()` after a stop before it is killed. */
export const STOP_GRACE_MS = 10_000;
/**
 * How long the head still accepts results from an executor whose exit was
 * reported. The agent's exit report and the executor's last result travel on
 * different sockets, so the report may overtake a result that was sent; such a
 * result is accepted (not re-run) if it arrives within this window.
 */
export const LATE_RESULT_GRACE_MS = 1_000;
/**
 * How long a gang member's failed call is held before the driver gets it.
 * When one rank loses its engine, the other ranks' collectives fail at once
 * too (a reset connection) and may reach the head before the lost rank's
 * heartbeat does; held, those calls end with the GangFailedError naming the
 * rank that was lost, not a gloo error from a surviving rank.
 */
export const GANG_ERROR_GRACE_MS = 1_000;

/** What the scheduler needs from the head's sockets. */
export interface SchedulerTransport {
  toDriver(routingId: Buffer, frames: Frames): void;
  toAgent(agent: AgentRecord, frames: Frames): void;
  toExecutor(executorId: string, frames: Frames): void;
  /** Asks an agent for a free TCP port on its host (gang rendezvous). */
  reservePort(agent: AgentRecord): Promise<number>;
  log(message: string): void;
  /** Apps or services changed (declared, started, stopped, failed): persist them, if the head has a data dir. */
  saveState?(): void;
}

export class Scheduler {
  readonly agents = new Map<string, AgentRecord>();
  readonly apps = new Map<string, AppRecord>();
  readonly services = new Map<string, ServiceRecord>();
  readonly executors = new Map<string, ExecutorRecord>();
  /** Executors whose exit was reported while they held calls, kept for LATE_RESULT_GRACE_MS to accept late results. */
  readonly draining = new Map<string, ExecutorRecord>();
  readonly router: CallRouter;
  /** Init, ready, call and lost-agent deadlines (deadlines.ts). */
  readonly deadlines: Deadlines;
  /** Service and executor ids (persisted ceilings keep them unique across head restarts). */
  readonly ids = { service: new IdCounter(), executor: new IdCounter() };

  constructor(private readonly transport: SchedulerTransport) {
    this.router = new CallRouter(transport, (call) => this.deadlines.onCallDeadline(call));
    this.deadlines = new Deadlines(this, transport);
  }

  /**
   * Declares a service in an app. The same spec again returns the existing
   * (warm) service; a failed or stopped one starts afresh; a different spec
   * is refused unless `replace` is set.
   */
  declare(app: AppRecord, spec: ServiceSpec, replace: boolean): ServiceRecord {
    const existing = app.services.get(spec.name);
    if (existing && existing.state !== "failed" && existing.state !== "stopped") {
      if (sameSpec(existing.spec, spec)) return existing;
      if (!replace) {
        throw new ServiceConfigError(
          `service '${spec.name}' already exists in app '${app.name}' with a different definition ` +
            `(${describe(existing.spec)}); pass { replace: true } to stop it and start the new one, or use another name`,
          { service: spec.name },
        );
      }
    }
    if (existing) this.stopService(existing, `service '${spec.name}' was replaced`);
    const kind = spec.autoscale ? "pool" : "gang";
    // An elastic service's agents come from its engine once it is declared: nothing to check against yet.
    if (!spec.elastic) this.checkSatisfiable(spec, kind);
    const n = this.ids.service.take();
    const s = newServiceRecord({ id: `s${n}`, app: app.name, spec, kind, state: kind === "gang" ? "pending" : "starting", seq: n, createdAt: Date.now() });
    app.services.set(spec.name, s);
    this.services.set(s.id, s);
    this.transport.log(`service ${s.id} '${spec.name}' (${kind}, ${describe(spec)}) declared in app '${app.name}'`);
    this.transport.saveState?.();
    this.schedule();
    return s;
  }

  /** Refuses a declaration no registered agent (or set of agents, for a gang) could ever hold. */
  private checkSatisfiable(spec: ServiceSpec, kind: "pool" | "gang"): void {
    const agents = [...this.agents.values()].filter((a) => agentAccepts(a.labels, { id: "", elastic: false }));
    if (agents.length === 0) {
      throw new ResreqError("no agent is registered with the head, so nothing can run; start one with `hearth agent --head <endpoint>`", { resreq: spec.resreq, service: spec.name });
    }
    if (!everFitsOne(agents, spec.resources)) {
      throw new ResreqError(`resreq "${spec.resreq}" of service '${spec.name}' can never be satisfied: no agent has that much (largest: ${largestAgent(agents)})`, { resreq: spec.resreq, service: spec.name });
    }
    if (kind === "gang" && !everFitsGang(agents, spec.resources, spec.warmup)) {
      throw new ResreqError(`gang '${spec.name}' of ${spec.warmup} × "${spec.resreq}" can never run at once on the registered agents (${agents.length} agent(s), largest: ${largestAgent(agents)})`, { resreq: spec.resreq, service: spec.name });
    }
  }

  /** Stops a service: its calls fail with `reason`, its executors get `close()` then exit. */
  stopService(s: ServiceRecord, reason: string): void {
    if (s.state === "stopped") return;
    const error = toWireError(new ClosedError(reason, { service: s.spec.name }));
    s.state = "stopped";
    this.router.failQueued(s, error);
    for (const e of s.executors.values()) {
      for (const call of e.inflight.values()) this.router.fail(call, error);
      e.inflight.clear();
      this.stopExecutor(e);
    }
    this.rejectWaiters(s, error);
    const app = this.apps.get(s.app);
    if (app?.services.get(s.spec.name) === s) app.services.delete(s.spec.name);
    this.forgetIfDone(s);
    this.transport.saveState?.();
  }

  /** Runs one scheduling pass: start pending gangs whole, grow pools, resolve readiness. */
  schedule(): void {
    const order = [...this.services.values()].sort((a, b) => a.seq - b.seq);
    for (const s of order) {
      if (s.state === "failed" || s.state === "stopped") continue;
      if (s.recovering) {
        // Restored after a head restart: serve the adopted executors, start nothing until the agents had time to report theirs.
      } else if (s.kind === "gang") {
        if (s.state === "pending") this.tryStartGang(s);
      } else {
        this.growPool(s);
      }
      this.router.dispatch(s);
      this.checkReady(s);
    }
  }

  /**
   * A call was queued on `s` or one of its calls finished: hand out queued
   * calls, and run a full pass only when some are still waiting (the pool may
   * need to grow). Keeps the per-call path short.
   */
  onCallsChanged(s: ServiceRecord): void {
    this.router.dispatch(s);
    if (s.queue.length > 0) this.schedule();
  }

  /** Stops idle pool executors beyond warmup once they were idle for the idle timeout. */
  shrinkIdle(now: number): void {
    for (const s of this.services.values()) {
      if (s.kind !== "pool" || s.state === "stopped" || s.state === "failed" || s.queue.length > 0) continue;
      const live = liveExecutors(s);
      const idle = live
        .filter((e) => e.state === "idle" && e.inflight.size === 0 && now - e.idleSince >= s.spec.idleTimeoutMs)
        .sort((a, b) => a.idleSince - b.idleSince);
      let excess = live.length - s.spec.warmup;
      for (const e of idle) {
        if (excess-- <= 0) break;
        this.transport.log(`pool '${s.spec.name}': executor ${e.id} idle for ${now - e.idleSince} ms, stopping`);
        this.stopExecutor(e);
      }
    }
  }

  private growPool(s: ServiceRecord): void {
    const live = liveExecutors(s);
    const c = s.spec.concurrency;
    let want = Math.max(s.spec.warmup, live.length);
    let free = 0;
    for (const e of live) free += e.state === "starting" ? c : isServing(e) ? c - e.inflight.size : 0;
    const deficit = s.queue.length - free;
    if (deficit > 0) want = Math.max(want, live.length + Math.ceil(deficit / c));
    want = Math.min(want, s.spec.max);
    s.blocked = false;
    for (let n = live.length; n < want; n++) {
      const p = placeOne(this.agentsFor(s), s.spec.resources);
      if (p === null) {
        s.blocked = true;
        break;
      }
      this.startExecutor(s, p);
    }
  }

  private tryStartGang(s: ServiceRecord): void {
    const placements = placeMany(this.agentsFor(s), s.spec.resources, s.spec.warmup);
    if (placements === null) {
      s.blocked = true;
      return;
    }
    s.blocked = false;
    s.state = "starting";
    const members = placements.map((p) => this.createExecutor(s, p));
    // Ranks follow sorted executor ids; ids are zero-padded so string order is creation order.
    members.sort((a, b) => (a.id < b.id ? -1 : 1)).forEach((e, rank) => (e.rank = rank));
    const rank0 = members[0]!;
    const agent0 = this.agents.get(rank0.agentId)!;
    this.transport.log(`gang '${s.spec.name}': granted ${members.length} members (${members.map((m) => `${m.id}@${m.agentId}`).join(", ")})`);
    this.transport
      .reservePort(agent0)
      .then((port) => {
        if (s.state !== "starting") return;
        s.rendezvous = { host: agent0.host, port };
        this.transport.saveState?.();
        for (const e of members) this.sendStart(s, e);
      })
      .catch((err: unknown) => {
        this.failService(s, toWireError(new ServiceStartError(`gang '${s.spec.name}': could not reserve a rendezvous port on agent ${agent0.id}: ${(err as Error).message}`, { service: s.spec.name, cause: err })));
      });
  }

  /** Agents this service may run on (see agentAccepts). */
  agentsFor(s: ServiceRecord): AgentRecord[] {
    return [...this.agents.values()].filter((a) => agentAccepts(a.labels, { id: s.id, elastic: s.spec.elastic }));
  }

  private startExecutor(s: ServiceRecord, p: Placement): void {
    this.sendStart(s, this.createExecutor(s, p));
  }

  private createExecutor(s: ServiceRecord, p: Placement): ExecutorRecord {
    const agent = this.agents.get(p.agentId)!;
    take(agent.free, s.spec.resources, p.gpus);
    const e: ExecutorRecord = {
      id: `x${String(this.ids.executor.take()).padStart(6, "0")}`,
      serviceId: s.id,
      agentId: agent.id,
      gpus: p.gpus,
      state: "starting",
      inflight: new Map(),
      startedAt: Date.now(),
      idleSince: Date.now(),
      callsDone: 0,
    };
    agent.executors.add(e.id);
    s.executors.set(e.id, e);
    this.executors.set(e.id, e);
    return e;
  }

  private sendStart(s: ServiceRecord, e: ExecutorRecord): void {
    const agent = this.agents.get(e.agentId);
    if (!agent) return;
    this.transport.toAgent(agent, [
      encode({
        t: "start",
        executor: e.id,
        app: s.app,
        service: s.spec.name,
        serviceId: s.id,
        module: s.spec.module,
        project: s.spec.project,
        export: s.spec.exportName,
        gpus: e.gpus,
        cpu: s.spec.resources.cpu,
        mem: s.spec.resources.mem,
        concurrency: s.spec.concurrency,
        rank: e.rank,
        worldSize: s.kind === "gang" ? s.spec.warmup : undefined,
        masterAddr: s.rendezvous?.host,
        masterPort: s.rendezvous?.port,
      }),
    ]);
  }

  private stopExecutor(e: ExecutorRecord): void {
    if (e.state === "stopping" || e.state === "dead") return;
    e.state = "stopping";
    const agent = this.agents.get(e.agentId);
    if (agent) this.transport.toAgent(agent, [encode({ t: "stop", executor: e.id, graceMs: STOP_GRACE_MS })]);
    else this.onExecutorExit(e.id, null, "agent-lost", "");
  }

  /** An executor finished `init` and is ready for calls. */
  onExecutorReady(id: string, pid: number): void {
    const e = this.executors.get(id);
    if (!e || e.state !== "starting") return;
    const s = this.services.get(e.serviceId)!;
    e.pid = pid;
    e.state = "idle";
    e.idleSince = Date.now();
    s.startFailures = 0;
    this.transport.log(`executor ${id} of '${s.spec.name}' ready (pid ${pid}${e.rank !== undefined ? `, rank ${e.rank}` : ""})`);
    this.router.dispatch(s);
    this.checkReady(s);
    this.schedule();
  }

  /** User code failed while loading or in `init`: the service fails (retrying the same code is pointless). */
  onExecutorInitFailed(id: string, error: WireError): void {
    const e = this.executors.get(id);
    if (!e) return;
    const s = this.services.get(e.serviceId)!;
    this.failService(s, toWireError(new ServiceStartError(`service '${s.spec.name}' failed to start on executor ${id}: ${error.remoteName ?? error.name}: ${error.message}`, { service: s.spec.name, executorId: id, cause: fromWireError(error) })));
  }

  /** An executor process is gone (agent report, or its agent was lost). */
  onExecutorExit(id: string, code: number | null, signal: string | null, detail: string): void {
    const e = this.executors.get(id);
    if (!e) return;
    const s = this.services.get(e.serviceId)!;
    const agent = this.agents.get(e.agentId);
    const expected = e.state === "stopping";
    const wasStarting = e.state === "starting";
    e.state = "dead";
    e.exit = { code, signal };
    if (agent) {
      give(agent.free, s.spec.resources, e.gpus, agent.total);
      agent.executors.delete(id);
    }
    this.executors.delete(id);
    s.executors.delete(id);
    const how = signal ? `signal ${signal}` : `exit code ${code}`;
    if (!expected && s.state !== "stopped" && s.state !== "failed") {
      this.transport.log(`executor ${id} of '${s.spec.name}' died (${how})${detail ? `: ${detail}` : ""}`);
      s.dead.push({ id, agentId: e.agentId, rank: e.rank, code, signal, diedAt: Date.now(), detail });
      if (s.dead.length > 10) s.dead.shift();
      if (s.kind === "gang") {
        this.failService(s, toWireError(new GangFailedError(`gang '${s.spec.name}' lost rank ${e.rank} (executor ${id} on agent ${e.agentId}, ${how}); declare the service again to restart it`, { service: s.spec.name, rank: e.rank ?? -1, executorId: id })), e);
      } else {
        if (e.inflight.size > 0) this.drain(s, e, how);
        if (wasStarting && ++s.startFailures >= MAX_START_FAILURES) {
          this.failService(s, toWireError(new ServiceStartError(`service '${s.spec.name}': ${s.startFailures} executors died while starting (last: ${id}, ${how})${detail ? `: ${detail}` : ""}`, { service: s.spec.name, executorId: id })));
        }
      }
    }
    this.forgetIfDone(s);
    this.schedule();
  }

  /**
   * Keeps a dead executor's calls for LATE_RESULT_GRACE_MS: a result that was
   * already on its way is accepted; the rest are requeued (they really died).
   */
  private drain(s: ServiceRecord, e: ExecutorRecord, how: string): void {
    this.draining.set(e.id, e);
    setTimeout(() => {
      this.draining.delete(e.id);
      if (e.inflight.size === 0) return;
      if (s.state === "failed" || s.state === "stopped") {
        for (const call of e.inflight.values()) this.router.fail(call, s.error ?? toWireError(new ClosedError(`service '${s.spec.name}' was stopped`, { service: s.spec.name })));
        e.inflight.clear();
        return;
      }
      this.router.evacuate(s, e, (call) => this.lostCallError(s, call, e.id, how));
      this.schedule();
    }, LATE_RESULT_GRACE_MS).unref();
  }

  private lostCallError(s: ServiceRecord, call: CallRecord, id: string, how: string): WireError {
    return toWireError(new ExecutorLostError(`call ${s.spec.name}.${call.method} was lost: ${call.attempts} executors died running it (last: ${id}, ${how})`, { service: s.spec.name, callId: call.cid, executorId: id }));
  }

  /**
   * An executor answered a call with an error. A pool's goes to the driver at
   * once; a gang's is held for GANG_ERROR_GRACE_MS (the call stays in flight
   * on that rank), so that if the gang fails meanwhile the call ends with the
   * gang's error instead.
   */
  onCallFailed(e: ExecutorRecord, hid: number, error: WireError): void {
    const s = this.services.get(e.serviceId);
    if (s?.kind !== "gang") {
      if (this.router.complete(e, hid, { error }) && s) this.onCallsChanged(s);
      return;
    }
    setTimeout(() => {
      if (this.router.complete(e, hid, { error })) this.onCallsChanged(s);
    }, GANG_ERROR_GRACE_MS).unref();
  }

  /** Kills an executor that may be wedged (no close()); a pool requeues its other calls and replaces it, a gang fails. */
  recycle(s: ServiceRecord, e: ExecutorRecord, reason: string): void {
    this.transport.log(`recycling executor ${e.id} of '${s.spec.name}': ${reason}`);
    if (s.kind === "gang") {
      this.failService(s, toWireError(new GangFailedError(`gang '${s.spec.name}' lost rank ${e.rank} (executor ${e.id} on agent ${e.agentId} was killed: ${reason}); declare the service again to restart it`, { service: s.spec.name, rank: e.rank ?? -1, executorId: e.id })));
    } else {
      this.router.evacuate(s, e, (call) => this.lostCallError(s, call, e.id, `killed: ${reason}`));
    }
    this.killExecutor(e);
    this.schedule();
  }

  /** Asks the agent to SIGKILL an executor now (graceMs 0: no close(), it may be stuck). */
  killExecutor(e: ExecutorRecord): void {
    if (e.state === "dead") return;
    e.state = "stopping";
    const agent = this.agents.get(e.agentId);
    if (agent) this.transport.toAgent(agent, [encode({ t: "stop", executor: e.id, graceMs: 0 })]);
    else this.onExecutorExit(e.id, null, "agent-lost", "");
  }

  /** The driver stopped waiting for call `cid` (abort or its own deadline). */
  cancelCall(driver: Buffer, cid: number): void {
    const call = this.router.find(driver, cid);
    if (call) this.router.cancel(this.services.get(call.serviceId), call);
  }

  /** An agent stopped heartbeating or re-registered: everything on it is gone. */
  onAgentLost(agent: AgentRecord): void {
    this.agents.delete(agent.id);
    for (const id of [...agent.executors]) this.onExecutorExit(id, null, null, `agent ${agent.id} was lost`);
  }

  /** Fails a service and everything in it; its remaining executors are stopped. */
  failService(s: ServiceRecord, error: WireError, dead?: ExecutorRecord): void {
    if (s.state === "failed" || s.state === "stopped") return;
    s.state = "failed";
    s.error = error;
    this.transport.log(`service '${s.spec.name}' failed: ${error.message}`);
    this.router.failQueued(s, error);
    if (dead) this.router.evacuate(s, dead, () => error, error);
    for (const e of s.executors.values()) {
      this.router.evacuate(s, e, () => error, error);
      this.stopExecutor(e);
    }
    this.router.failQueued(s, error);
    this.rejectWaiters(s, error);
    this.transport.saveState?.();
  }

  private checkReady(s: ServiceRecord): void {
    if (s.state !== "starting" && s.state !== "ready") return;
    const live = liveExecutors(s);
    const serving = live.filter(isServing).length;
    const starting = live.filter((e) => e.state === "starting").length;
    const ready =
      s.kind === "gang"
        ? serving === s.spec.warmup
        : serving >= s.spec.warmup || (serving >= 1 && starting === 0 && s.blocked);
    if (!ready) return;
    s.state = "ready";
    const info = this.serviceInfo(s);
    for (const w of s.waiters) this.transport.toDriver(w.routingId, [encode({ t: "rep", rid: w.rid, ok: true, value: info })]);
    s.waiters = [];
  }

  /** Registers a driver request to be answered when `s` is ready (or fails). */
  awaitReady(s: ServiceRecord, routingId: Buffer, rid: number, timeoutMs?: number): void {
    s.waiters.push({ routingId, rid, timeoutMs, deadline: timeoutMs === undefined ? undefined : Date.now() + timeoutMs });
    if (s.state === "failed" || s.state === "stopped") {
      this.rejectWaiters(s, s.error ?? toWireError(new ClosedError(`service '${s.spec.name}' was stopped`, { service: s.spec.name })));
    } else {
      this.checkReady(s);
    }
  }

  private rejectWaiters(s: ServiceRecord, error: WireError): void {
    for (const w of s.waiters) this.transport.toDriver(w.routingId, [encode({ t: "rep", rid: w.rid, ok: false, error })]);
    s.waiters = [];
  }

  private forgetIfDone(s: ServiceRecord): void {
    if (s.state === "stopped" && s.executors.size === 0) this.services.delete(s.id);
  }

  /** The public description of a service, sent to drivers. */
  serviceInfo(s: ServiceRecord): Record<string, unknown> {
    const members = [...s.executors.values()]
      .filter((e) => e.rank !== undefined)
      .sort((a, b) => a.rank! - b.rank!)
      .map((e) => ({ rank: e.rank, executorId: e.id, agentId: e.agentId, host: this.agents.get(e.agentId)?.host, gpus: e.gpus }));
    return {
      ...serviceSummary(s),
      concurrency: s.spec.concurrency,
      callTimeoutMs: s.spec.callTimeoutMs,
      initTimeoutMs: s.spec.initTimeoutMs,
      maxQueued: s.spec.maxQueued,
      module: s.spec.module,
      export: s.spec.exportName,
      members: s.kind === "gang" ? members : undefined,
      rendezvous: s.rendezvous,
      error: s.error,
    };
  }
}

/** The fields of a service that both service info and the status document show. */
export function serviceSummary(s: ServiceRecord): { id: string; name: string; kind: "pool" | "gang"; state: string; resreq: string; warmup: number; max: number | null } {
  return {
    id: s.id,
    name: s.spec.name,
    kind: s.kind,
    state: s.state,
    resreq: formatResources(s.spec.resources),
    warmup: s.spec.warmup,
    max: Number.isFinite(s.spec.max) ? s.spec.max : null,
  };
}


function sameSpec(a: ServiceSpec, b: ServiceSpec): boolean {
  return JSON.stringify({ ...a, max: String(a.max) }) === JSON.stringify({ ...b, max: String(b.max) });
}

function describe(spec: ServiceSpec): string {
  return `${spec.module}#${spec.exportName}, resreq ${formatResources(spec.resources)}, warmup ${spec.warmup}${spec.autoscale ? "" : ", gang"}`;
}

function largestAgent(agents: AgentRecord[]): string {
  const a = agents.reduce((x, y) => (y.total.cpu > x.total.cpu ? y : x));
  return `${a.id} with ${formatResources({ cpu: a.total.cpu, mem: a.total.mem, gpu: a.total.gpus.length })}`;
}
