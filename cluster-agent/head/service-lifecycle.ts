/**
 * The lifecycle of a service, the same for every kind: declared (the same
 * spec again returns the warm service, a different one is refused unless
 * replaced), pending or starting, ready once its policy says enough
 * executors serve (the warmup), and finally failed or stopped, which ends
 * its calls, answers its readiness waiters and stops its executors. What
 * differs between pools and gangs is asked of the service's policy
 * (service-policy.ts).
 */
import { encode } from "../../sdk/wire/codec.js";
import type { Frames } from "../../sdk/wire/channel.js";
import { ClosedError, ResreqError, ServiceConfigError } from "../../sdk/errors/index.js";
import { toWireError, type WireError } from "../../sdk/wire/errors.js";
import { formatResources } from "../../sdk/runtime/resreq.js";
import type { CallRouter } from "./call-router.js";
import type { IdCounter } from "./ids.js";
import { agentAccepts, everFitsOne } from "./placement.js";
import { newServiceRecord, type AgentRecord, type AppRecord, type ExecutorRecord, type ServiceRecord, type ServiceSpec } from "./records.js";
import { largestAgent, serviceKind, type ServicePolicy } from "./service-policy.js";

/** What the lifecycle needs of the scheduler (it implements this). */
export interface LifecycleHost {
  readonly agents: Map<string, AgentRecord>;
  readonly apps: Map<string, AppRecord>;
  readonly services: Map<string, ServiceRecord>;
  readonly router: CallRouter;
  readonly ids: { readonly service: IdCounter };
  /** The policy of a service's kind. */
  policyFor(s: Pick<ServiceRecord, "kind">): ServicePolicy;
  /** Stops an executor gracefully. */
  stopExecutor(e: ExecutorRecord): void;
  /** Runs a scheduling pass. */
  schedule(): void;
}

/** Where the lifecycle sends readiness answers and logs, and how it persists. */
export interface LifecycleTransport {
  toDriver(routingId: Buffer, frames: Frames): void;
  log(message: string): void;
  saveState?(): void;
}

/** Declares, readies, fails and stops services. */
export class ServiceLifecycle {
  constructor(
    private readonly host: LifecycleHost,
    private readonly transport: LifecycleTransport,
  ) {}

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
    const kind = serviceKind(spec);
    const policy = this.host.policyFor({ kind });
    // An elastic service's agents come from its engine once it is declared: nothing to check against yet.
    if (!spec.elastic) this.checkSatisfiable(spec, policy);
    const n = this.host.ids.service.take();
    const s = newServiceRecord({ id: `s${n}`, app: app.name, spec, kind, state: policy.initialState, seq: n, createdAt: Date.now() });
    app.services.set(spec.name, s);
    this.host.services.set(s.id, s);
    this.transport.log(`service ${s.id} '${spec.name}' (${kind}, ${describe(spec)}) declared in app '${app.name}'`);
    this.transport.saveState?.();
    this.host.schedule();
    return s;
  }

  /** Refuses a declaration no registered agent (or set of agents, for a gang) could ever hold. */
  private checkSatisfiable(spec: ServiceSpec, policy: ServicePolicy): void {
    const agents = [...this.host.agents.values()].filter((a) => agentAccepts(a.labels, { id: "", elastic: false }));
    if (agents.length === 0) {
      throw new ResreqError("no agent is registered with the head, so nothing can run; start one with `hearth agent --head <endpoint>`", { resreq: spec.resreq, service: spec.name });
    }
    if (!everFitsOne(agents, spec.resources)) {
      throw new ResreqError(`resreq "${spec.resreq}" of service '${spec.name}' can never be satisfied: no agent has that much (largest: ${largestAgent(agents)})`, { resreq: spec.resreq, service: spec.name });
    }
    const never = policy.unsatisfiable(spec, agents);
    if (never !== undefined) throw new ResreqError(never, { resreq: spec.resreq, service: spec.name });
  }

  /** Stops a service: its calls fail with `reason`, its executors get `close()` then exit. */
  stopService(s: ServiceRecord, reason: string): void {
    if (s.state === "stopped") return;
    const error = toWireError(new ClosedError(reason, { service: s.spec.name }));
    s.state = "stopped";
    this.host.router.failQueued(s, error);
    for (const e of s.executors.values()) {
      for (const call of e.inflight.values()) this.host.router.fail(call, error);
      e.inflight.clear();
      this.host.stopExecutor(e);
    }
    this.rejectWaiters(s, error);
    const app = this.host.apps.get(s.app);
    if (app?.services.get(s.spec.name) === s) app.services.delete(s.spec.name);
    this.forgetIfDone(s);
    this.transport.saveState?.();
  }

  /** Fails a service and everything in it; its remaining executors are stopped. */
  failService(s: ServiceRecord, error: WireError, dead?: ExecutorRecord): void {
    if (s.state === "failed" || s.state === "stopped") return;
    s.state = "failed";
    s.error = error;
    this.transport.log(`service '${s.spec.name}' failed: ${error.message}`);
    const router = this.host.router;
    router.failQueued(s, error);
    if (dead) router.evacuate(s, dead, () => error, error);
    for (const e of s.executors.values()) {
      router.evacuate(s, e, () => error, error);
      this.host.stopExecutor(e);
    }
    router.failQueued(s, error);
    this.rejectWaiters(s, error);
    this.transport.saveState?.();
  }

  /** Marks a starting service ready once its policy says enough executors serve, and answers its waiters. */
  checkReady(s: ServiceRecord): void {
    if (s.state !== "starting" && s.state !== "ready") return;
    // Ready with nobody waiting: nothing to change or send (this runs on every call's path).
    if (s.state === "ready" && s.waiters.length === 0) return;
    if (!this.host.policyFor(s).isReady(s)) return;
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

  /** Forgets a stopped service once its last executor is gone. */
  forgetIfDone(s: ServiceRecord): void {
    if (s.state === "stopped" && s.executors.size === 0) this.host.services.delete(s.id);
  }

  /** The public description of a service, sent to drivers. */
  serviceInfo(s: ServiceRecord): Record<string, unknown> {
    return {
      ...serviceSummary(s),
      concurrency: s.spec.concurrency,
      callTimeoutMs: s.spec.callTimeoutMs,
      initTimeoutMs: s.spec.initTimeoutMs,
      maxQueued: s.spec.maxQueued,
      module: s.spec.module,
      export: s.spec.exportName,
      members: this.host.policyFor(s).members(s, (agentId) => this.host.agents.get(agentId)?.host),
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

/**
 * The same service? Whether it may wait for agents yet to come (`elastic`,
 * set by the driver that provisions them, e.g. the Slurm engine's) is how it
 * is provisioned, not what it is: a client of the app without that engine
 * (`hearth attach` of a run on Slurm) names the same service.
 */
function sameSpec(a: ServiceSpec, b: ServiceSpec): boolean {
  const key = (s: ServiceSpec): string => JSON.stringify({ ...s, max: String(s.max), elastic: undefined });
  return key(a) === key(b);
}

function describe(spec: ServiceSpec): string {
  return `${spec.module}#${spec.exportName}, resreq ${formatResources(spec.resources)}, warmup ${spec.warmup}${spec.autoscale ? "" : ", gang"}`;
}
