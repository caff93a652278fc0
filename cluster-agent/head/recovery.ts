/**
 * A head restart keeps the work. A head started on the data dir of one that
 * died rebuilds its apps and services from the persisted specs (persist.ts),
 * then adopts the live executors its agents report when they register again:
 * same process, same warm state, same rank. For a recovery window (the
 * agent timeout: every live agent heartbeats, is told to re-register and
 * reports within it) restored services start nothing new, so an executor
 * that is merely late to be reported is not replaced; adopted executors
 * serve calls at once. When the window closes, a pool grows back to its
 * warmup and a gang that did not get every rank back fails with
 * GangFailedError naming the missing ranks, as a gang that loses a member
 * always does.
 */
import { encode } from "../../sdk/wire/codec.js";
import type { Frames } from "../../sdk/wire/channel.js";
import type { PersistedState } from "./persist.js";
import { agentAccepts, take } from "./placement.js";
import { newServiceRecord, type AgentRecord, type ExecutorRecord, type ServiceRecord } from "./records.js";
import { STOP_GRACE_MS, type Scheduler } from "./scheduler.js";
import { serviceKind } from "./service-policy.js";
import type { LiveExecutor } from "../executor-supervisor.js";

/** One live executor as an agent reports it in `register` (the agent's own description of it). */
export type ExecutorReport = LiveExecutor;

/** Rebuilds the registry after a head restart and adopts reported executors. */
export class Recovery {
  /** When the recovery window closes (epoch ms); 0 when the head is not recovering. */
  private until = 0;
  /** `ready` messages from executors not yet reported by their agent (the message overtook the report). */
  private readonly earlyReady = new Map<string, number>();

  constructor(
    private readonly sched: Scheduler,
    private readonly toAgent: (agent: AgentRecord, frames: Frames) => void,
    private readonly log: (line: string) => void,
  ) {}

  /** True while the window is open: unknown executors may be adopted yet, so they are not told to exit. */
  get active(): boolean {
    return this.until > 0;
  }

  /** Recreates the persisted apps (their keep-alive clock starts now) and services (empty, recovering). */
  restore(state: PersistedState, windowMs: number): void {
    const now = Date.now();
    for (const a of state.apps) {
      this.sched.apps.set(a.name, { name: a.name, keepAliveMs: a.keepAliveMs, drivers: new Map(), services: new Map(), createdAt: a.createdAt, goneSince: now });
    }
    for (const p of state.services) {
      const app = this.sched.apps.get(p.app);
      if (!app || app.services.has(p.spec.name)) continue;
      const kind = serviceKind(p.spec);
      const s = newServiceRecord({
        id: p.id,
        app: p.app,
        spec: p.spec,
        kind,
        // A service that had started (a gang granted) resumes starting; one that had not starts as declared.
        state: p.started ? "starting" : this.sched.policyFor({ kind }).initialState,
        seq: p.seq,
        createdAt: p.createdAt,
        rendezvous: p.rendezvous,
        recovering: true,
      });
      app.services.set(p.spec.name, s);
      this.sched.services.set(s.id, s);
    }
    if (this.sched.services.size > 0) this.until = now + windowMs;
    this.log(`restored ${state.apps.length} app(s) and ${this.sched.services.size} service(s) from the data dir; adopting reported executors for ${windowMs / 1000} s`);
  }

  /**
   * An agent registered and reported its live executors: adopt those that
   * belong to a recovering service (resources taken, state kept), and stop
   * the rest (their service is gone, or the window closed and replacements
   * may already run).
   */
  adopt(agent: AgentRecord, raw: unknown): void {
    for (const r of parseReports(raw, this.log)) {
      // Never hand out a reported id again (a head without a data dir starts counting at 1): the exit report of
      // an executor stopped here must not be taken for a new executor's.
      const n = Number(r.id.slice(1));
      if (this.sched.ids.executor.next <= n) this.sched.ids.executor.next = n + 1;
      if (this.sched.executors.has(r.id)) continue;
      const s = this.sched.services.get(r.serviceId);
      const why = s ? this.refusal(agent, s, r) : `service ${r.serviceId} is not known to this head`;
      if (why !== undefined || !s) {
        this.log(`agent ${agent.id} reported executor ${r.id} (pid ${r.pid}); stopping it: ${why}`);
        this.toAgent(agent, [encode({ t: "stop", executor: r.id, graceMs: STOP_GRACE_MS })]);
        continue;
      }
      const early = this.earlyReady.get(r.id);
      this.earlyReady.delete(r.id);
      const ready = r.ready || early !== undefined;
      const e: ExecutorRecord = {
        id: r.id,
        serviceId: s.id,
        agentId: agent.id,
        gpus: r.gpus,
        state: ready ? "idle" : "starting",
        rank: this.sched.policyFor(s).adoptedRank(r.rank),
        pid: ready ? r.pid : undefined,
        inflight: new Map(),
        startedAt: Date.now(),
        idleSince: Date.now(),
        callsDone: 0,
        unconfirmed: true,
      };
      take(agent.free, s.spec.resources, r.gpus);
      agent.executors.add(e.id);
      s.executors.set(e.id, e);
      this.sched.executors.set(e.id, e);
      this.log(`adopted executor ${e.id} of '${s.spec.name}' (pid ${r.pid}${e.rank !== undefined ? `, rank ${e.rank}` : ""}, ${e.state}) from agent ${agent.id}`);
    }
  }

  /** Why `r` cannot be adopted into `s` on `agent`, or undefined when it can. */
  private refusal(agent: AgentRecord, s: ServiceRecord, r: ExecutorReport): string | undefined {
    if (!s.recovering) return `service '${s.spec.name}' is not recovering (the recovery window closed, or it was declared anew)`;
    if (s.state === "failed" || s.state === "stopped" || s.state === "pending") return `service '${s.spec.name}' is ${s.state}`;
    if (!agentAccepts(agent.labels, { id: s.id, elastic: s.spec.elastic })) return `agent ${agent.id} may not host service '${s.spec.name}'`;
    const need = s.spec.resources;
    if (r.gpus.length !== need.gpu || r.gpus.some((g) => !agent.free.gpus.includes(g)) || agent.free.cpu < need.cpu - 1e-9 || agent.free.mem < need.mem) {
      return `its resources (${need.cpu} cpu, gpus [${r.gpus.join(",")}]) are not free on agent ${agent.id}`;
    }
    return this.sched.policyFor(s).refuseAdoption(s, r.rank);
  }

  /** An adopted executor was heard from on its own connection: calls can reach it now. */
  confirm(e: ExecutorRecord): void {
    if (!e.unconfirmed) return;
    e.unconfirmed = undefined;
    this.sched.schedule();
  }

  /** An executor not (yet) reported said `ready` during the window: remembered for when its agent reports it. */
  noteReady(executorId: string, pid: number): void {
    if (this.earlyReady.size < 10_000) this.earlyReady.set(executorId, pid);
  }

  /** Closes the window once it has passed: pools may grow again, incomplete gangs fail. */
  tick(now: number): void {
    if (this.until === 0 || now < this.until) return;
    this.until = 0;
    this.earlyReady.clear();
    for (const e of [...this.sched.executors.values()]) {
      if (!e.unconfirmed) continue;
      // Reported by its agent but never heard from itself: it cannot be reached, so it is replaced (a gang fails below).
      this.log(`adopted executor ${e.id} never reconnected to this head; killing it`);
      this.sched.killExecutor(e);
    }
    for (const s of [...this.sched.services.values()]) {
      if (!s.recovering) continue;
      s.recovering = false;
      this.sched.policyFor(s).onRecovered(s);
    }
    this.sched.schedule();
  }
}

/** Validates the `executors` field of a `register` message (peer data). */
function parseReports(raw: unknown, log: (line: string) => void): ExecutorReport[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    log("register: 'executors' is not a list; ignored");
    return [];
  }
  const out: ExecutorReport[] = [];
  for (const x of raw.slice(0, 4096) as Array<Record<string, unknown>>) {
    const ok =
      x !== null && typeof x === "object" && typeof x.id === "string" && /^x\d{1,15}$/.test(x.id) && typeof x.serviceId === "string" &&
      (x.rank === null || x.rank === undefined || typeof x.rank === "number") && Array.isArray(x.gpus) && typeof x.pid === "number";
    if (!ok) {
      log(`register: skipping a malformed executor report ${JSON.stringify(x)?.slice(0, 200)}`);
      continue;
    }
    out.push({ id: x.id as string, serviceId: x.serviceId as string, rank: typeof x.rank === "number" ? x.rank : null, gpus: (x.gpus as unknown[]).map(String), pid: x.pid as number, ready: x.ready === true });
  }
  return out;
}
