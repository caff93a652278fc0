/**
 * Call routing inside the head: queue calls per service, hand them to
 * executors with free concurrency, forward results to the driver that asked,
 * and requeue a dead executor's calls. Each call is answered exactly once:
 * a result from an executor that no longer owns the call is dropped, and a
 * call id a driver sends again (in flight, or recently answered) is ignored,
 * so a replayed call runs once. Calls with a deadline get a timer; what
 * happens when it fires (fail, recycle the executor) is the scheduler's.
 */
import { encode } from "../../sdk/wire/codec.js";
import type { Frames } from "../../sdk/wire/channel.js";
import { ClosedError } from "../../sdk/errors/index.js";
import { toWireError, type WireError } from "../../sdk/wire/errors.js";
import { IdCounter } from "./ids.js";
import type { CallRecord, ExecutorRecord, ServiceRecord } from "./records.js";

/** How many executors may die under one call before it fails. */
export const MAX_CALL_ATTEMPTS = 3;
/** Answered call ids remembered (head-wide) so that a replay is recognised and not run again. */
export const REMEMBERED_ANSWERS = 100_000;

/** Where the router sends frames. */
export interface CallTransport {
  toDriver(routingId: Buffer, frames: Frames): void;
  toExecutor(executorId: string, frames: Frames): void;
}

/** How queued calls of one service meet its executors (the service's policy: service-policy.ts). */
export interface CallDispatch {
  /** Hands queued calls of `s` to executors with free slots through `send`; the rest stay queued. */
  dispatch(s: ServiceRecord, send: (e: ExecutorRecord, call: CallRecord) => void): void;
}

/** Routes calls; owns the table of calls in flight. */
export class CallRouter {
  readonly calls = new Map<number, CallRecord>();
  /** Calls in flight by driver routing id (hex) and driver call id. */
  private readonly byDriverCid = new Map<string, CallRecord>();
  /** Recently answered driver call ids (insertion order = age), at most REMEMBERED_ANSWERS. */
  private readonly answered = new Set<string>();
  /** Head call ids; unique across head restarts with a data dir (ids.ts). */
  readonly hids = new IdCounter();
  /** Counters for status and tests. */
  readonly stats = { submitted: 0, answered: 0, retried: 0, staleResults: 0, replays: 0, timedOut: 0, cancelled: 0 };

  constructor(
    private readonly transport: CallTransport,
    /** Called when a call's deadline passes while it is still unanswered. */
    private readonly onDeadline: (call: CallRecord) => void,
    /** Which executor takes which call depends on the kind of service (a gang's rank, a pool's least loaded). */
    private readonly dispatchOf: (s: ServiceRecord) => CallDispatch,
  ) {}

  /**
   * Accepts a call from a driver and queues it on its service. Returns
   * undefined (and runs nothing) when this driver already sent this call id.
   * A pool call with `target` waits for that executor only.
   */
  submit(s: ServiceRecord, driver: Buffer, cid: number, method: string, args: Buffer, rank?: number, timeoutMs?: number, target?: string): CallRecord | undefined {
    const key = driverCidKey(driver, cid);
    if (this.byDriverCid.has(key) || this.answered.has(key)) {
      this.stats.replays++;
      return undefined;
    }
    this.stats.submitted++;
    const call: CallRecord = { hid: this.hids.take(), driver, cid, serviceId: s.id, method, args, rank, target, attempts: 0, timeoutMs };
    this.calls.set(call.hid, call);
    this.byDriverCid.set(key, call);
    if (timeoutMs !== undefined) {
      call.timer = setTimeout(() => {
        if (this.calls.get(call.hid) !== call) return;
        this.stats.timedOut++;
        this.onDeadline(call);
      }, timeoutMs);
    }
    s.queue.push(call);
    return call;
  }

  /**
   * True when this driver already used `cid` (in flight or recently
   * answered): the message is a replay, counted and ignored, so it neither
   * runs again nor gets a second answer (not even an error).
   */
  isReplay(driver: Buffer, cid: number): boolean {
    const key = driverCidKey(driver, cid);
    if (!this.byDriverCid.has(key) && !this.answered.has(key)) return false;
    this.stats.replays++;
    return true;
  }

  /** Records `cid` as answered without a call record (the head refused it on arrival), so a replay is recognised too. */
  remember(driver: Buffer, cid: number): void {
    this.answered.add(driverCidKey(driver, cid));
    if (this.answered.size > REMEMBERED_ANSWERS) this.answered.delete(this.answered.values().next().value!);
  }

  /** The call a driver has in flight under `cid`, if any. */
  find(driver: Buffer, cid: number): CallRecord | undefined {
    return this.byDriverCid.get(driverCidKey(driver, cid));
  }

  /** The driver stopped waiting: a queued call is dropped, a running one runs on but its answer is not sent. */
  cancel(s: ServiceRecord | undefined, call: CallRecord): void {
    this.stats.cancelled++;
    call.cancelled = true;
    if (call.executorId === undefined) {
      if (s) s.queue = s.queue.filter((c) => c !== call);
      this.answer(call, { error: toWireError(new ClosedError("cancelled by the driver", { service: s?.spec.name })) });
    }
  }

  /** Hands queued calls of `s` to executors with free slots, as its policy routes them. */
  dispatch(s: ServiceRecord): void {
    if (s.queue.length === 0) return;
    this.dispatchOf(s).dispatch(s, (e, call) => this.send(e, call));
  }

  private send(e: ExecutorRecord, call: CallRecord): void {
    call.executorId = e.id;
    call.attempts++;
    e.inflight.set(call.hid, call);
    e.state = "busy";
    this.transport.toExecutor(e.id, [encode({ t: "call", hid: call.hid, method: call.method }), call.args]);
  }

  /**
   * An executor answered. Returns the call when the answer was accepted, or
   * null when it was stale (the call had moved to another executor or ended).
   */
  complete(e: ExecutorRecord, hid: number, outcome: { value: Buffer } | { error: WireError }): CallRecord | null {
    const call = this.calls.get(hid);
    if (!call || call.executorId !== e.id || !e.inflight.has(hid)) {
      this.stats.staleResults++;
      return null;
    }
    e.inflight.delete(hid);
    e.callsDone++;
    if (e.inflight.size === 0 && e.state === "busy") {
      e.state = "idle";
      e.idleSince = Date.now();
    }
    this.answer(call, outcome);
    return call;
  }

  /** Ends a call with an error (no executor involved). */
  fail(call: CallRecord, error: WireError): void {
    this.answer(call, { error });
  }

  /** Ends every queued call of `s` with `error`. */
  failQueued(s: ServiceRecord, error: WireError): void {
    for (const call of s.queue) this.answer(call, { error });
    s.queue = [];
  }

  /**
   * An executor is gone. Its calls go back to the front of the queue (pools)
   * or fail with `gangError` (gangs, where a rank cannot move elsewhere).
   */
  evacuate(s: ServiceRecord, e: ExecutorRecord, lostError: (call: CallRecord) => WireError, gangError?: WireError): void {
    const calls = [...e.inflight.values()].sort((a, b) => a.hid - b.hid);
    e.inflight.clear();
    const retry: CallRecord[] = [];
    // Calls pinned to this executor cannot move: queued or running, they end with it.
    const pinned = s.queue.filter((call) => call.target === e.id);
    if (pinned.length > 0) s.queue = s.queue.filter((call) => call.target !== e.id);
    for (const call of pinned) this.answer(call, { error: lostError(call) });
    for (const call of calls) {
      call.executorId = undefined;
      if (gangError) this.answer(call, { error: gangError });
      else if (call.target !== undefined) this.answer(call, { error: lostError(call) });
      else if (call.attempts >= MAX_CALL_ATTEMPTS) this.answer(call, { error: lostError(call) });
      else retry.push(call);
    }
    this.stats.retried += retry.length;
    s.queue = [...retry, ...s.queue];
  }

  private answer(call: CallRecord, outcome: { value: Buffer } | { error: WireError }): void {
    if (!this.calls.delete(call.hid)) return;
    clearTimeout(call.timer);
    const key = driverCidKey(call.driver, call.cid);
    this.byDriverCid.delete(key);
    this.answered.add(key);
    if (this.answered.size > REMEMBERED_ANSWERS) this.answered.delete(this.answered.values().next().value!);
    this.stats.answered++;
    if (call.cancelled) return;
    if ("value" in outcome) {
      this.transport.toDriver(call.driver, [encode({ t: "result", cid: call.cid }), outcome.value]);
    } else {
      this.transport.toDriver(call.driver, [encode({ t: "failed", cid: call.cid, error: outcome.error })]);
    }
  }
}

function driverCidKey(driver: Buffer, cid: number): string {
  return `${driver.toString("hex")}:${cid}`;
}

/** An executor that can take calls now (ready, not stopping). */
export function isServing(e: ExecutorRecord): boolean {
  return (e.state === "idle" || e.state === "busy") && e.unconfirmed !== true;
}

/** Executors that exist or are on their way (not stopping, not dead). */
export function liveExecutors(s: ServiceRecord): ExecutorRecord[] {
  return [...s.executors.values()].filter((e) => e.state !== "stopping" && e.state !== "dead");
}
