/**
 * The pool policy: executors are placed one at a time; the pool grows while
 * calls pend (up to `max`) and shrinks back to its warmup once executors sit
 * idle past the idle timeout. Calls go to the least loaded serving executor,
 * or wait for the one they are pinned to. A dead executor's calls are kept
 * briefly for late results and then requeued on the others; a pool whose
 * executors keep dying while starting fails.
 */
import { ServiceStartError } from "../../sdk/errors/index.js";
import { toWireError, type WireError } from "../../sdk/wire/errors.js";
import { isServing, liveExecutors } from "./call-router.js";
import { placeOne } from "./placement.js";
import type { CallRecord, ExecutorRecord, ServiceRecord } from "./records.js";
import { noSuchExecutor, type CallAddress, type ExecutorDeath, type PolicyContext, type ServicePolicy } from "./service-policy.js";

/** How many executors of a service may die while starting, in a row, before it fails. */
export const MAX_START_FAILURES = 3;

/** Autoscaling pools of interchangeable executors. */
export class PoolPolicy implements ServicePolicy {
  readonly kind = "pool";
  readonly initialState = "starting";
  readonly endsOrphanedCalls = true;

  constructor(private readonly ctx: PolicyContext) {}

  /** A pool needs one executor to fit somewhere; that is checked for every kind. */
  unsatisfiable(): string | undefined {
    return undefined;
  }

  /** Grows the pool to its warmup, and beyond while queued calls outnumber free slots (up to `max`). */
  place(s: ServiceRecord): void {
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
      const p = placeOne(this.ctx.agentsFor(s), s.spec.resources);
      if (p === null) {
        s.blocked = true;
        break;
      }
      this.ctx.sendStart(s, this.ctx.createExecutor(s, p));
    }
  }

  /** Stops idle executors beyond warmup once they were idle for the idle timeout. */
  shrinkIdle(s: ServiceRecord, now: number): void {
    if (s.state === "stopped" || s.state === "failed" || s.queue.length > 0) return;
    const live = liveExecutors(s);
    const idle = live
      .filter((e) => e.state === "idle" && e.inflight.size === 0 && now - e.idleSince >= s.spec.idleTimeoutMs)
      .sort((a, b) => a.idleSince - b.idleSince);
    let excess = live.length - s.spec.warmup;
    for (const e of idle) {
      if (excess-- <= 0) break;
      this.ctx.log(`pool '${s.spec.name}': executor ${e.id} idle for ${now - e.idleSince} ms, stopping`);
      this.ctx.stopExecutor(e);
    }
  }

  /** Ready with warmup executors serving, or with at least one when nothing more can start (blocked). */
  isReady(s: ServiceRecord): boolean {
    const live = liveExecutors(s);
    const serving = live.filter(isServing).length;
    const starting = live.filter((e) => e.state === "starting").length;
    return serving >= s.spec.warmup || (serving >= 1 && starting === 0 && s.blocked);
  }

  /** A pool call carries no rank; it may name one executor (to reach every member, e.g. for digests) and then waits for that one only. */
  addressCall(s: ServiceRecord, _rank: number | undefined, exe: string | undefined): CallAddress {
    if (exe !== undefined && !s.executors.has(exe)) return { error: noSuchExecutor(s, exe) };
    return { target: exe };
  }

  /** Queued calls go to the least loaded serving executor with a free slot; pinned calls wait for theirs. */
  dispatch(s: ServiceRecord, send: (e: ExecutorRecord, call: CallRecord) => void): void {
    const c = s.spec.concurrency;
    const serving = [...s.executors.values()].filter(isServing);
    if (serving.length === 0) return;
    if (s.queue.some((call) => call.target !== undefined)) {
      // Pinned calls wait for their executor; the others take any free one, in order.
      const rest: CallRecord[] = [];
      for (const call of s.queue) {
        const e = call.target !== undefined ? s.executors.get(call.target) : leastLoaded(serving, c);
        if (e && isServing(e) && e.inflight.size < c) send(e, call);
        else rest.push(call);
      }
      s.queue = rest;
      return;
    }
    let taken = 0;
    while (taken < s.queue.length) {
      const best = leastLoaded(serving, c);
      if (best === null) break;
      send(best, s.queue[taken++]!);
    }
    if (taken > 0) s.queue = s.queue.slice(taken);
  }

  /** Pool executors take no world size. */
  worldSize(): number | undefined {
    return undefined;
  }

  /** Its calls are drained (late results accepted, the rest requeued); too many deaths while starting fail the pool. */
  onExecutorDied(s: ServiceRecord, e: ExecutorRecord, death: ExecutorDeath): void {
    if (e.inflight.size > 0) this.ctx.drain(s, e, death.how);
    if (death.wasStarting && ++s.startFailures >= MAX_START_FAILURES) {
      this.ctx.failService(
        s,
        toWireError(new ServiceStartError(`service '${s.spec.name}': ${s.startFailures} executors died while starting (last: ${e.id}, ${death.how})${death.detail && death.detail !== death.how ? `: ${death.detail}` : ""}`, { service: s.spec.name, executorId: e.id })),
      );
    }
  }

  /** A pool's failed call goes to the driver at once. */
  onCallFailed(s: ServiceRecord, e: ExecutorRecord, hid: number, error: WireError): void {
    if (this.ctx.router.complete(e, hid, { error })) this.ctx.onCallsChanged(s);
  }

  /** The executor's other calls are requeued (a replacement starts on the next pass). */
  onRecycle(s: ServiceRecord, e: ExecutorRecord, reason: string): void {
    this.ctx.router.evacuate(s, e, (call) => this.ctx.lostCallError(s, call, e.id, `killed: ${reason}`));
  }

  /** A pool replaces the executor. */
  afterCallTimeout(): string {
    return "the executor was killed and is being replaced";
  }

  /** The warmup target as a ready timeout names it. */
  describeWarmup(s: ServiceRecord): string {
    return `${s.spec.warmup} warm executor(s)`;
  }

  /** A pool's info lists no members (members() asks for them). */
  members(): unknown[] | undefined {
    return undefined;
  }

  /** Pool executors have no rank. */
  adoptedRank(): number | undefined {
    return undefined;
  }

  /** Any executor of a recovering pool may rejoin it. */
  refuseAdoption(): string | undefined {
    return undefined;
  }

  /** A pool grows back to its warmup on the next pass. */
  onRecovered(): void {}
}

/** The serving executor with the fewest calls in flight and a free slot, if any. */
function leastLoaded(serving: ExecutorRecord[], concurrency: number): ExecutorRecord | null {
  let best: ExecutorRecord | null = null;
  for (const e of serving) if (e.inflight.size < concurrency && (best === null || e.inflight.size < best.inflight.size)) best = e;
  return best;
}
