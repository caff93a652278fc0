/**
 * The gang policy: a gang of `warmup` members is granted all at once or not
 * at all (pending until it fits, in declaration order), its members get
 * ranks by sorted executor id, and rank 0's agent reserves a rendezvous port
 * before any member starts. Each call goes to the member of its rank. A gang
 * is one unit: losing any member (its process, its engine, a timed-out call,
 * a rank missing after a head restart) fails the whole gang with
 * GangFailedError naming the rank; declaring it again restarts it.
 */
import { GangFailedError, ServiceStartError } from "../../sdk/errors/index.js";
import { ProtocolError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import { isServing, liveExecutors } from "./call-router.js";
import { everFitsGang, placeMany } from "./placement.js";
import type { AgentRecord, CallRecord, ExecutorRecord, ServiceRecord, ServiceSpec } from "./records.js";
import { largestAgent, noSuchExecutor, type CallAddress, type ExecutorDeath, type PolicyContext, type ServicePolicy } from "./service-policy.js";

/**
 * How long a gang member's failed call is held before the driver gets it.
 * When one rank loses its engine, the other ranks' collectives fail at once
 * too (a reset connection) and may reach the head before the lost rank's
 * heartbeat does; held, those calls end with the GangFailedError naming the
 * rank that was lost, not a gloo error from a surviving rank.
 */
export const GANG_ERROR_GRACE_MS = 1_000;

/** Fixed-size gangs of ranked members that start, serve and fail together. */
export class GangPolicy implements ServicePolicy {
  readonly kind = "gang";
  readonly initialState = "pending";
  readonly endsOrphanedCalls = false;

  constructor(private readonly ctx: PolicyContext) {}

  /** A gang that no set of registered agents could ever hold at once. */
  unsatisfiable(spec: ServiceSpec, agents: AgentRecord[]): string | undefined {
    if (everFitsGang(agents, spec.resources, spec.warmup)) return undefined;
    return `gang '${spec.name}' of ${spec.warmup} × "${spec.resreq}" can never run at once on the registered agents (${agents.length} agent(s), largest: ${largestAgent(agents)})`;
  }

  /** A pending gang is granted whole when every member fits; otherwise it stays pending (blocked). */
  place(s: ServiceRecord): void {
    if (s.state !== "pending") return;
    const placements = placeMany(this.ctx.agentsFor(s), s.spec.resources, s.spec.warmup);
    if (placements === null) {
      s.blocked = true;
      return;
    }
    s.blocked = false;
    s.state = "starting";
    const members = placements.map((p) => this.ctx.createExecutor(s, p));
    // Ranks follow sorted executor ids; ids are zero-padded so string order is creation order.
    members.sort((a, b) => (a.id < b.id ? -1 : 1)).forEach((e, rank) => (e.rank = rank));
    const rank0 = members[0]!;
    const agent0 = this.ctx.agents.get(rank0.agentId)!;
    this.ctx.log(`gang '${s.spec.name}': granted ${members.length} members (${members.map((m) => `${m.id}@${m.agentId}`).join(", ")})`);
    this.ctx
      .reservePort(agent0)
      .then((port) => {
        if (s.state !== "starting") return;
        s.rendezvous = { host: agent0.host, port };
        this.ctx.saveState();
        for (const e of members) this.ctx.sendStart(s, e);
      })
      .catch((err: unknown) => {
        this.ctx.failService(s, toWireError(new ServiceStartError(`gang '${s.spec.name}': could not reserve a rendezvous port on agent ${agent0.id}: ${(err as Error).message}`, { service: s.spec.name, cause: err })));
      });
  }

  /** A gang keeps its members while it runs. */
  shrinkIdle(): void {}

  /** Ready when every member serves. */
  isReady(s: ServiceRecord): boolean {
    return liveExecutors(s).filter(isServing).length === s.spec.warmup;
  }

  /** A gang call names its rank; it cannot name an executor. */
  addressCall(s: ServiceRecord, rank: number | undefined, exe: string | undefined): CallAddress {
    if (rank === undefined || !Number.isInteger(rank) || rank < 0 || rank >= s.spec.warmup) {
      return { error: toWireError(new ProtocolError(`gang '${s.spec.name}' has ranks 0..${s.spec.warmup - 1}; got rank ${String(rank)}`)) };
    }
    if (exe !== undefined) return { error: noSuchExecutor(s, exe) };
    return { rank };
  }

  /** Each queued call goes to the member of its rank when that one has a free slot. */
  dispatch(s: ServiceRecord, send: (e: ExecutorRecord, call: CallRecord) => void): void {
    const c = s.spec.concurrency;
    const byRank = new Map<number, ExecutorRecord>();
    for (const e of s.executors.values()) if (e.rank !== undefined) byRank.set(e.rank, e);
    const rest: CallRecord[] = [];
    for (const call of s.queue) {
      const e = byRank.get(call.rank ?? -1);
      if (e && isServing(e) && e.inflight.size < c) send(e, call);
      else rest.push(call);
    }
    s.queue = rest;
  }

  /** Every member learns the gang's size (torch.distributed's world size). */
  worldSize(s: ServiceRecord): number | undefined {
    return s.spec.warmup;
  }

  /** A lost member fails the gang; its calls end with the gang's error. */
  onExecutorDied(s: ServiceRecord, e: ExecutorRecord, death: ExecutorDeath): void {
    this.ctx.failService(
      s,
      toWireError(new GangFailedError(`gang '${s.spec.name}' lost rank ${e.rank} (executor ${e.id} on agent ${e.agentId}, ${death.how}); declare the service again to restart it`, { service: s.spec.name, rank: e.rank ?? -1, executorId: e.id })),
      e,
    );
  }

  /**
   * A gang's failed call is held for GANG_ERROR_GRACE_MS (the call stays in
   * flight on that rank), so that if the gang fails meanwhile the call ends
   * with the gang's error instead.
   */
  onCallFailed(s: ServiceRecord, e: ExecutorRecord, hid: number, error: WireError): void {
    setTimeout(() => {
      if (this.ctx.router.complete(e, hid, { error })) this.ctx.onCallsChanged(s);
    }, GANG_ERROR_GRACE_MS).unref();
  }

  /** A member killed as wedged fails the gang. */
  onRecycle(s: ServiceRecord, e: ExecutorRecord, reason: string): void {
    this.ctx.failService(s, toWireError(new GangFailedError(`gang '${s.spec.name}' lost rank ${e.rank} (executor ${e.id} on agent ${e.agentId} was killed: ${reason}); declare the service again to restart it`, { service: s.spec.name, rank: e.rank ?? -1, executorId: e.id })));
  }

  /** A gang fails with its member. */
  afterCallTimeout(name: string): string {
    return `the executor was killed and gang '${name}' fails (declare it again to restart it)`;
  }

  /** The warmup target as a ready timeout names it. */
  describeWarmup(s: ServiceRecord): string {
    return `${s.spec.warmup} gang members`;
  }

  /** The members by rank, with where each runs (drivers address ranks and read the rendezvous from this). */
  members(s: ServiceRecord, hostOf: (agentId: string) => string | undefined): unknown[] {
    return [...s.executors.values()]
      .filter((e) => e.rank !== undefined)
      .sort((a, b) => a.rank! - b.rank!)
      .map((e) => ({ rank: e.rank, executorId: e.id, agentId: e.agentId, host: hostOf(e.agentId), gpus: e.gpus }));
  }

  /** An adopted member keeps the rank its agent reported. */
  adoptedRank(rank: number | null): number | undefined {
    return rank ?? undefined;
  }

  /** A reported member must hold a rank of this gang that no other adopted member holds. */
  refuseAdoption(s: ServiceRecord, rank: number | null): string | undefined {
    if (rank === null || !Number.isInteger(rank) || rank < 0 || rank >= s.spec.warmup) return `rank ${String(rank)} is not a rank of gang '${s.spec.name}'`;
    if ([...s.executors.values()].some((e) => e.rank === rank)) return `gang '${s.spec.name}' already has rank ${rank}`;
    return undefined;
  }

  /** A running gang that did not get every rank back after a head restart fails, naming the missing ranks. */
  onRecovered(s: ServiceRecord): void {
    if (s.state !== "starting" && s.state !== "ready") return;
    const have = new Set(liveExecutors(s).map((e) => e.rank));
    const missing = [...Array(s.spec.warmup).keys()].filter((rank) => !have.has(rank));
    if (missing.length === 0) return;
    const back = liveExecutors(s).filter(isServing).length;
    this.ctx.failService(s, toWireError(new GangFailedError(
      `gang '${s.spec.name}' lost rank ${missing.join(", ")} in the head restart (${back} of ${s.spec.warmup} members were reported by their agents); declare the service again to restart it`,
      { service: s.spec.name, rank: missing[0]! },
    )));
  }
}

