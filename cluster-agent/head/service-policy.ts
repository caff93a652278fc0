/**
 * What differs between the two kinds of service, behind one interface. A
 * pool (pool-policy.ts) places executors one at a time, grows while calls
 * pend, shrinks when idle and moves a dead executor's calls elsewhere; a gang
 * (gang-policy.ts) is granted whole or not at all, gives its members ranks and
 * a rendezvous, routes each call to its rank, and fails as a whole when any
 * member is lost. The scheduler picks the policy once per service by its
 * `kind` (Scheduler.policyFor); the scheduler, the service lifecycle, the call
 * router, recovery and deadlines ask the policy instead of branching on kind.
 */
import { formatResources } from "../../sdk/runtime/resreq.js";
import { ExecutorNotFoundError } from "../../sdk/errors/index.js";
import { toWireError, type WireError } from "../../sdk/wire/errors.js";
import type { CallDispatch, CallRouter } from "./call-router.js";
import type { Placement } from "./placement.js";
import type { AgentRecord, CallRecord, ExecutorRecord, ServiceRecord, ServiceSpec, ServiceState } from "./records.js";

/** The kind of service a spec declares: an autoscaling pool, or a fixed-size gang. */
export function serviceKind(spec: ServiceSpec): ServiceRecord["kind"] {
  return spec.autoscale ? "pool" : "gang";
}

/** How an unexpected executor death reads (for errors and the service's `dead` list). */
export interface ExecutorDeath {
  /** "exit code N" or "signal S". */
  how: string;
  /** What its agent said about it, or "". */
  detail: string;
  /** It died before it was ready. */
  wasStarting: boolean;
}

/** Where a driver's call goes: a gang's rank, a pool's pinned executor (or any), or why it is refused. */
export type CallAddress = { rank?: number; target?: string } | { error: WireError };

/** The behaviour of one kind of service. */
export interface ServicePolicy extends CallDispatch {
  /** The kind this policy runs (the `kind` of records and of the wire). */
  readonly kind: ServiceRecord["kind"];
  /** The state a newly declared service starts in (a gang is pending until it can be granted whole). */
  readonly initialState: ServiceState;
  /**
   * Whether queued calls of a service no registered agent can host any more
   * end after a grace period (deadlines.ts): a pool's wait for an agent that
   * will not come; a gang's calls end with the gang.
   */
  readonly endsOrphanedCalls: boolean;
  /** Why `spec` could never run on `agents` though one executor fits (a gang that never fits at once), or undefined. */
  unsatisfiable(spec: ServiceSpec, agents: AgentRecord[]): string | undefined;
  /** One scheduling pass for a service that is not recovering: grant, start or grow it. */
  place(s: ServiceRecord): void;
  /** On the head's tick: stops executors idle past the idle timeout beyond warmup (a gang keeps its members). */
  shrinkIdle(s: ServiceRecord, now: number): void;
  /** True when enough executors serve for `s` to be ready. */
  isReady(s: ServiceRecord): boolean;
  /** Checks a call's rank (`rank`) or pinned executor (`exe`) and says where it goes. */
  addressCall(s: ServiceRecord, rank: number | undefined, exe: string | undefined): CallAddress;
  /** The world size an executor's start message carries (a gang's member count), or undefined. */
  worldSize(s: ServiceRecord): number | undefined;
  /** An executor of `s` died unexpectedly while `s` was running: requeue, count start failures, or fail the gang. */
  onExecutorDied(s: ServiceRecord, e: ExecutorRecord, death: ExecutorDeath): void;
  /** An executor answered call `hid` with an error. */
  onCallFailed(s: ServiceRecord, e: ExecutorRecord, hid: number, error: WireError): void;
  /** An executor of `s` that may be wedged is about to be killed: what becomes of its calls (and of `s`). */
  onRecycle(s: ServiceRecord, e: ExecutorRecord, reason: string): void;
  /** What a call timing out on an executor of service `name` does to it, for the TimeoutError message. */
  afterCallTimeout(name: string): string;
  /** The warmup target as a ready timeout names it. */
  describeWarmup(s: ServiceRecord): string;
  /** The members a service's info lists (a gang's ranks), or undefined. */
  members(s: ServiceRecord, hostOf: (agentId: string) => string | undefined): unknown[] | undefined;
  /** After a head restart: the rank an executor reported with `rank` keeps. */
  adoptedRank(rank: number | null): number | undefined;
  /** After a head restart: why an executor reported with `rank` cannot rejoin `s`, or undefined. */
  refuseAdoption(s: ServiceRecord, rank: number | null): string | undefined;
  /** The recovery window closed for `s`: a gang that did not get every rank back fails. */
  onRecovered(s: ServiceRecord): void;
}

/** What a policy may do to the scheduler's registry (the scheduler builds it; policies never import scheduler.ts). */
export interface PolicyContext {
  readonly agents: Map<string, AgentRecord>;
  readonly router: CallRouter;
  /** Agents `s` may run on. */
  agentsFor(s: ServiceRecord): AgentRecord[];
  /** Creates an executor record at a placement (resources taken), without starting it. */
  createExecutor(s: ServiceRecord, p: Placement): ExecutorRecord;
  /** Tells the executor's agent to start it. */
  sendStart(s: ServiceRecord, e: ExecutorRecord): void;
  /** Stops an executor gracefully (`close()`, then exit). */
  stopExecutor(e: ExecutorRecord): void;
  /** Keeps a dead executor's calls for late results, then requeues them (scheduler.ts). */
  drain(s: ServiceRecord, e: ExecutorRecord, how: string): void;
  /** The ExecutorLostError of a call whose executor died. */
  lostCallError(s: ServiceRecord, call: CallRecord, executorId: string, how: string): WireError;
  /** Fails `s` and everything in it (service-lifecycle.ts). */
  failService(s: ServiceRecord, error: WireError, dead?: ExecutorRecord): void;
  /** Calls of `s` changed: dispatch, and schedule if some still wait. */
  onCallsChanged(s: ServiceRecord): void;
  /** Asks an agent for a free port on its host. */
  reservePort(agent: AgentRecord): Promise<number>;
  log(message: string): void;
  /** Persist apps and services, if the head has a data dir. */
  saveState(): void;
}

/** The error of a call naming an executor the service does not have. */
export function noSuchExecutor(s: ServiceRecord, exe: string): WireError {
  return toWireError(new ExecutorNotFoundError(`service '${s.spec.name}' has no executor '${exe}' (list them with members())`, { service: s.spec.name, executorId: exe }));
}

/** The agent with the most cpus, for "can never run" messages. */
export function largestAgent(agents: AgentRecord[]): string {
  const a = agents.reduce((x, y) => (y.total.cpu > x.total.cpu ? y : x));
  return `${a.id} with ${formatResources({ cpu: a.total.cpu, mem: a.total.mem, gpu: a.total.gpus.length })}`;
}
