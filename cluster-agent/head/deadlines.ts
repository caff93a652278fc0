/**
 * The deadlines the head enforces: a call past its deadline (TimeoutError;
 * the executor running it is recycled), an executor not ready within its
 * service's init timeout (killed; the service fails), a `ready` wait past its
 * deadline, and queued calls of a pool that no registered agent can host any
 * more (its only agent was lost). Each error says what timed out and why.
 */
import { encode } from "../../sdk/wire/codec.js";
import type { Frames } from "../../sdk/wire/channel.js";
import { ExecutorLostError, ServiceStartError, TimeoutError } from "../../sdk/errors/index.js";
import { toWireError } from "../../sdk/wire/errors.js";
import { isServing, liveExecutors, type CallRouter } from "./call-router.js";
import { everFitsOne } from "./placement.js";
import type { AgentRecord, CallRecord, ExecutorRecord, ServiceRecord } from "./records.js";
import type { ServiceLifecycle } from "./service-lifecycle.js";
import type { ServicePolicy } from "./service-policy.js";
import { explainPending } from "./pending.js";

/** What deadline handling needs from the scheduler (it implements this). */
export interface DeadlineHost {
  readonly agents: Map<string, AgentRecord>;
  readonly services: Map<string, ServiceRecord>;
  readonly executors: Map<string, ExecutorRecord>;
  readonly draining: Map<string, ExecutorRecord>;
  readonly router: CallRouter;
  readonly lifecycle: Pick<ServiceLifecycle, "failService">;
  agentsFor(s: ServiceRecord): AgentRecord[];
  policyFor(s: Pick<ServiceRecord, "kind">): ServicePolicy;
  killExecutor(e: ExecutorRecord): void;
  recycle(s: ServiceRecord, e: ExecutorRecord, reason: string): void;
}

/** Checks deadlines for one scheduler. */
export class Deadlines {
  constructor(
    private readonly host: DeadlineHost,
    private readonly transport: { toDriver(routingId: Buffer, frames: Frames): void },
  ) {}

  /** A call's deadline passed: it fails with TimeoutError; the executor running it (maybe wedged) is killed and replaced. */
  onCallDeadline(call: CallRecord): void {
    const s = this.host.services.get(call.serviceId);
    const name = s?.spec.name ?? call.serviceId;
    const secs = `${(call.timeoutMs ?? 0) / 1000} s`;
    const e = call.executorId !== undefined ? (this.host.executors.get(call.executorId) ?? this.host.draining.get(call.executorId)) : undefined;
    if (!e) {
      if (s) s.queue = s.queue.filter((c) => c !== call);
      this.host.router.fail(call, toWireError(new TimeoutError(`call ${call.cid} to ${name}.${call.method} timed out after ${secs} while queued: ${s ? this.whyQueued(s) : "its service is gone"}`, { service: name, callId: call.cid })));
      return;
    }
    e.inflight.delete(call.hid);
    call.executorId = undefined;
    // A service already forgotten (stopped, its executors gone) reads as a pool's: nothing more fails.
    const policy = this.host.policyFor(s ?? { kind: "pool" });
    this.host.router.fail(call, toWireError(new TimeoutError(
      `call ${call.cid} to ${name}.${call.method} timed out after ${secs} on executor ${e.id} (agent ${e.agentId}); ` + policy.afterCallTimeout(name),
      { service: name, executorId: e.id, callId: call.cid },
    )));
    if (s && e.state !== "dead") this.host.recycle(s, e, `call ${call.cid} (${name}.${call.method}) passed its ${secs} deadline`);
  }

  /** Why a queued call of `s` has not reached an executor, for timeout messages. */
  private whyQueued(s: ServiceRecord): string {
    const live = liveExecutors(s);
    const starting = live.filter((e) => e.state === "starting").length;
    if (live.length === 0) {
      return s.blocked || this.host.agentsFor(s).length === 0
        ? `no executor of '${s.spec.name}' is running and none can be placed (${this.host.agentsFor(s).length} agent(s) registered that may host it; an agent may have been lost)`
        : `no executor of '${s.spec.name}' is running yet`;
    }
    if (starting === live.length) return `the ${starting} executor(s) of '${s.spec.name}' are still starting (init running)`;
    return `all ${live.length - starting} ready executor(s) of '${s.spec.name}' were busy${starting > 0 ? `, ${starting} starting` : ""}${s.blocked ? ", and the pool cannot grow (resources or max)" : ""}`;
  }

  /**
   * Deadlines the head enforces on its tick: executors that do not become
   * ready within their service's init timeout, `ready` waits past their
   * deadline, and queued calls of a pool no registered agent can host any more
   * (its only agent was lost), which end after `orphanGraceMs`.
   */
  check(now: number, orphanGraceMs: number): void {
    for (const e of [...this.host.executors.values()]) {
      if (e.state !== "starting") continue;
      const s = this.host.services.get(e.serviceId)!;
      if (now - e.startedAt <= s.spec.initTimeoutMs) continue;
      const secs = s.spec.initTimeoutMs / 1000;
      this.host.lifecycle.failService(s, toWireError(new ServiceStartError(
        `service '${s.spec.name}': executor ${e.id} on agent ${e.agentId} was not ready within its init timeout of ${secs} s (module load, project setup or init() still running); it was killed. Raise initTimeoutMs if init is legitimately slow.`,
        { service: s.spec.name, executorId: e.id },
      )));
      this.host.killExecutor(e);
    }
    for (const s of this.host.services.values()) {
      const late = s.waiters.filter((w) => w.deadline !== undefined && now >= w.deadline);
      if (late.length > 0) {
        s.waiters = s.waiters.filter((w) => !late.includes(w));
        for (const w of late) {
          const error = toWireError(new TimeoutError(
            `service '${s.spec.name}' was not ready within ${(w.timeoutMs ?? 0) / 1000} s: ${this.describeStart(s)}. It stays declared (declaring it again waits again; app.stopService('${s.spec.name}') stops it).`,
            { service: s.spec.name },
          ));
          this.transport.toDriver(w.routingId, [encode({ t: "rep", rid: w.rid, ok: false, error })]);
        }
      }
      if (!this.host.policyFor(s).endsOrphanedCalls || s.spec.elastic || s.recovering || s.state === "failed" || s.state === "stopped" || s.queue.length === 0 || liveExecutors(s).length > 0 || everFitsOne(this.host.agentsFor(s), s.spec.resources)) {
        s.orphanedSince = undefined;
        continue;
      }
      s.orphanedSince ??= now;
      if (now - s.orphanedSince < orphanGraceMs) continue;
      const n = s.queue.length;
      const why = `no agent can run service '${s.spec.name}' (${this.host.agents.size === 0 ? "no agent is registered" : "no registered agent is big enough"}; its agent was lost or left): ${n} queued call(s) ended after ${orphanGraceMs / 1000} s. Start an agent and call again.`;
      // One error per call, each naming its own call id.
      for (const call of s.queue.splice(0)) this.host.router.fail(call, toWireError(new ExecutorLostError(why, { service: s.spec.name, callId: call.cid })));
      s.orphanedSince = undefined;
    }
  }

  /** A short account of where a service's start stands (for ready timeouts). */
  private describeStart(s: ServiceRecord): string {
    const live = liveExecutors(s);
    const ready = live.filter(isServing).length;
    const starting = live.filter((e) => e.state === "starting").length;
    const want = this.host.policyFor(s).describeWarmup(s);
    // Not placed in full: the same account the driver was shown while it waited (pending.ts).
    const pending = explainPending(this.host, s);
    if (pending) return `state ${s.state}, ${ready} ready and ${starting} starting of ${want}; ${pending.text}`;
    return `state ${s.state}, ${ready} ready and ${starting} starting of ${want}${s.blocked ? "; waiting for free resources (another service may hold them)" : ""}`;
  }
}
