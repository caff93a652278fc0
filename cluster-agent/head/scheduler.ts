/**
 * The head's scheduler: the registry of agents, apps, services and
 * executors, and what happens to executors — placed and started, ready,
 * failed to start, dead, stopped, killed — and to agents that are lost. What
 * differs between pools and gangs is the service's policy (pool-policy.ts,
 * gang-policy.ts), picked once per kind by policyFor; a service's states and
 * readiness are its lifecycle (service-lifecycle.ts).
 */
import { encode } from "../../sdk/wire/codec.js";
import type { Frames } from "../../sdk/wire/channel.js";
import { ClosedError, ExecutorLostError, ServiceStartError } from "../../sdk/errors/index.js";
import { fromWireError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import { CallRouter } from "./call-router.js";
import { Deadlines } from "./deadlines.js";
import { GangPolicy } from "./gang-policy.js";
import { IdCounter } from "./ids.js";
import { agentAccepts, give, take, type Placement } from "./placement.js";
import { PoolPolicy } from "./pool-policy.js";
import type { AgentRecord, AppRecord, CallRecord, ExecutorRecord, ServiceRecord } from "./records.js";
import { ServiceLifecycle } from "./service-lifecycle.js";
import type { PolicyContext, ServicePolicy } from "./service-policy.js";

/** How long an executor gets to run `close()` after a stop before it is killed. */
export const STOP_GRACE_MS = 10_000;
/**
 * How long the head still accepts results from an executor whose exit was
 * reported. The agent's exit report and the executor's last result travel on
 * different sockets, so the report may overtake a result that was sent; such a
 * result is accepted (not re-run) if it arrives within this window.
 */
export const LATE_RESULT_GRACE_MS = 1_000;

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

/** Places executors and reacts to what happens to them; owns the registry. */
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
  /** Declaring, readying, failing and stopping services (service-lifecycle.ts). */
  readonly lifecycle: ServiceLifecycle;
  /** The policy of each kind, each with this scheduler's context. */
  private readonly policies: Record<ServiceRecord["kind"], ServicePolicy>;

  constructor(private readonly transport: SchedulerTransport) {
    this.router = new CallRouter(transport, (call) => this.deadlines.onCallDeadline(call), (s) => this.policyFor(s));
    this.deadlines = new Deadlines(this, transport);
    this.lifecycle = new ServiceLifecycle(this, transport);
    const ctx: PolicyContext = {
      agents: this.agents,
      router: this.router,
      agentsFor: (s) => this.agentsFor(s),
      createExecutor: (s, p) => this.createExecutor(s, p),
      sendStart: (s, e) => this.sendStart(s, e),
      stopExecutor: (e) => this.stopExecutor(e),
      drain: (s, e, how) => this.drain(s, e, how),
      lostCallError: (s, call, id, how) => this.lostCallError(s, call, id, how),
      failService: (s, error, dead) => this.lifecycle.failService(s, error, dead),
      onCallsChanged: (s) => this.onCallsChanged(s),
      reservePort: (agent) => this.transport.reservePort(agent),
      log: (m) => this.transport.log(m),
      saveState: () => this.transport.saveState?.(),
    };
    this.policies = { pool: new PoolPolicy(ctx), gang: new GangPolicy(ctx) };
  }

  /** The policy of a service's kind: everything that differs between pools and gangs. */
  policyFor(s: Pick<ServiceRecord, "kind">): ServicePolicy {
    return this.policies[s.kind];
  }

  /** Runs one scheduling pass: each service's policy places (grants a pending gang, grows a pool), then calls are dispatched and readiness resolved. */
  schedule(): void {
    const order = [...this.services.values()].sort((a, b) => a.seq - b.seq);
    for (const s of order) this.scheduleOne(s);
  }

  /**
   * One service's part of a pass. Calls changing on one service alter no other
   * service's resources or readiness, so `onCallsChanged` runs only this.
   */
  private scheduleOne(s: ServiceRecord): void {
    if (s.state === "failed" || s.state === "stopped") return;
    // Restored after a head restart: serve the adopted executors, start nothing until the agents had time to report theirs.
    if (!s.recovering) this.policyFor(s).place(s);
    this.router.dispatch(s);
    this.lifecycle.checkReady(s);
  }

  /**
   * A call was queued on `s` or one of its calls finished: hand out queued
   * calls, and run this service's pass only when some are still waiting (the
   * pool may need to grow). Keeps the per-call path short.
   */
  onCallsChanged(s: ServiceRecord): void {
    this.router.dispatch(s);
    if (s.queue.length > 0) this.scheduleOne(s);
  }

  /** Stops idle executors beyond warmup once they were idle for the idle timeout (pools; policyFor decides). */
  shrinkIdle(now: number): void {
    for (const s of this.services.values()) this.policyFor(s).shrinkIdle(s, now);
  }

  /** Agents this service may run on (see agentAccepts). */
  agentsFor(s: ServiceRecord): AgentRecord[] {
    return [...this.agents.values()].filter((a) => agentAccepts(a.labels, { id: s.id, elastic: s.spec.elastic }));
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
        drivesApp: s.spec.drivesApp === true,
        rank: e.rank,
        worldSize: this.policyFor(s).worldSize(s),
        masterAddr: s.rendezvous?.host,
        masterPort: s.rendezvous?.port,
      }),
    ]);
  }

  /** Stops an executor gracefully: `close()`, then exit (killed after STOP_GRACE_MS). */
  stopExecutor(e: ExecutorRecord): void {
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
    this.lifecycle.checkReady(s);
    this.schedule();
  }

  /** User code failed while loading or in `init`: the service fails (retrying the same code is pointless). */
  onExecutorInitFailed(id: string, error: WireError): void {
    const e = this.executors.get(id);
    if (!e) return;
    const s = this.services.get(e.serviceId)!;
    this.lifecycle.failService(s, toWireError(new ServiceStartError(`service '${s.spec.name}' failed to start on executor ${id}: ${error.remoteName ?? error.name}: ${error.message}`, { service: s.spec.name, executorId: id, cause: fromWireError(error) })));
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
    // An executor whose agent was lost has no exit status: say what is known instead of "exit code null".
    const how = signal ? `signal ${signal}` : code !== null ? `exit code ${code}` : detail || "no exit status reported";
    if (!expected && s.state !== "stopped" && s.state !== "failed") {
      this.transport.log(`executor ${id} of '${s.spec.name}' died (${how})${detail && detail !== how ? `: ${detail}` : ""}`);
      s.dead.push({ id, agentId: e.agentId, rank: e.rank, code, signal, diedAt: Date.now(), detail });
      if (s.dead.length > 10) s.dead.shift();
      this.policyFor(s).onExecutorDied(s, e, { how, detail, wasStarting });
    }
    this.lifecycle.forgetIfDone(s);
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

  /** An executor answered a call with an error: a pool's goes to the driver at once, a gang's is held briefly (gang-policy.ts). */
  onCallFailed(e: ExecutorRecord, hid: number, error: WireError): void {
    const s = this.services.get(e.serviceId);
    if (s) this.policyFor(s).onCallFailed(s, e, hid, error);
    else this.router.complete(e, hid, { error });
  }

  /** Kills an executor that may be wedged (no close()); a pool requeues its other calls and replaces it, a gang fails. */
  recycle(s: ServiceRecord, e: ExecutorRecord, reason: string): void {
    this.transport.log(`recycling executor ${e.id} of '${s.spec.name}': ${reason}`);
    this.policyFor(s).onRecycle(s, e, reason);
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
}
