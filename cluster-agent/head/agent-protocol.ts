/**
 * The head's side of the agent protocol: what an agent that proved its
 * credential may send — `register` (with the live executors it runs, after a
 * head restart), heartbeats, object requests, and the start failures and
 * exits of the executors the head placed on it — the head's own requests to
 * agents (a rendezvous port for a gang), and agent liveness: an agent silent
 * past the agent timeout (or, once one of its executors reported it gone,
 * past SUSPECT_AGENT_TIMEOUT_MS) is lost with everything on it.
 */
import { encode, num, obj, str, type Header } from "../../sdk/wire/codec.js";
import { AuthError, ProtocolError, fromWireError, type WireError } from "../../sdk/wire/errors.js";
import { AgentRequestError } from "../../sdk/errors/index.js";
import { answerObject, type HeadContext } from "./head-context.js";
import { parseMemoryReport, type AgentRecord, type NodeCacheReport } from "./records.js";
import type { SealNotice } from "../seal-notice.js";

/** The node cache figures of a heartbeat (peer data: only numbers and short strings are kept), or undefined when absent or malformed. */
function cacheReport(v: unknown): NodeCacheReport | undefined {
  const c = v as Record<string, unknown> | undefined;
  if (typeof c?.objects !== "number" || typeof c.bytes !== "number") return undefined;
  const num = (k: string): number | undefined => (typeof c[k] === "number" ? (c[k] as number) : undefined);
  const text = (k: string): string | undefined => (typeof c[k] === "string" ? (c[k] as string).slice(0, 512) : undefined);
  const r: NodeCacheReport = { objects: c.objects, bytes: c.bytes };
  const fileBytes = num("fileBytes");
  const fileLimit = num("fileLimit");
  const dir = text("dir");
  const medium = text("medium");
  if (fileBytes !== undefined) r.fileBytes = fileBytes;
  if (fileLimit !== undefined) r.fileLimit = fileLimit;
  if (dir !== undefined) r.dir = dir;
  if (medium !== undefined) r.medium = medium;
  return r;
}

/** An executor's report that its agent is gone ends that agent after this much more silence. */
export const SUSPECT_AGENT_TIMEOUT_MS = 2_500;

/** How long the head waits for an agent to answer one of its requests. */
const AGENT_REQUEST_TIMEOUT_MS = 10_000;

/** Agents: their messages, the head's requests to them, and their liveness. */
export class AgentProtocol {
  private nextRid = 1;
  private readonly replies = new Map<number, { resolve: (v: Header) => void; reject: (e: Error) => void; timer: NodeJS.Timeout; op: string }>();

  constructor(
    private readonly ctx: HeadContext,
    /** An agent silent for this long is lost. */
    private readonly agentTimeoutMs: number,
  ) {}

  /** Handles one message from a proven agent. */
  onMessage(id: Buffer, agentId: string, h: Header, frames: Buffer[]): void {
    const sched = this.ctx.scheduler;
    if (h.t === "rep") {
      const pending = this.replies.get(num(h, "rid"));
      if (!pending) return;
      this.replies.delete(num(h, "rid"));
      clearTimeout(pending.timer);
      if (h.ok === true) pending.resolve(h);
      else {
        const cause = h.error ? fromWireError(h.error as WireError) : undefined;
        pending.reject(new AgentRequestError(`agent ${agentId} failed '${pending.op}': ${cause?.message ?? "no reason given"}`, { agentId, op: pending.op, cause }));
      }
      return;
    }
    if (h.t === "register") return this.register(id, agentId, h);
    const agent = sched.agents.get(agentId);
    if (!agent) {
      // A head restart or a lost agent: ask it to register afresh.
      this.ctx.sendTo(id, [encode({ t: "reregister" })]);
      return;
    }
    agent.lastSeen = Date.now();
    if (h.t === "hb") {
      agent.cache = cacheReport(h.cache) ?? agent.cache;
      agent.memory = parseMemoryReport(h.memory) ?? agent.memory;
      // Answered so the agent can tell its head is alive (and exit after a grace period when it is not).
      this.ctx.sendTo(id, [encode({ t: "hb", head: this.ctx.id })]);
      return;
    }
    if (h.t === "req") {
      const op = str(h, "op");
      if (!op.startsWith("obj-")) throw new ProtocolError(`unknown request op '${op}' from an agent`);
      const ns = typeof h.app === "string" ? h.app : "";
      const requesting = { id: agentId, endpointOf: (other: string) => sched.agents.get(other)?.cacheEndpoint };
      return answerObject(this.ctx, id, num(h, "rid"), () => this.ctx.objects.serve(op, ns, h, frames, "agent", id.toString("latin1"), requesting));
    }
    if ((h.t === "start-failed" || h.t === "exit") && !this.reportsOwn(agent, str(h, "executor"))) {
      throw new AuthError(`agent ${agentId} reported '${h.t}' for executor ${str(h, "executor")}, which runs on another agent; ignored`);
    }
    if (h.t === "start-failed") {
      const executor = str(h, "executor");
      sched.onExecutorInitFailed(executor, obj(h, "error") as unknown as WireError);
      sched.onExecutorExit(executor, null, null, "never started");
      return;
    }
    if (h.t === "exit") {
      const detail = typeof h.detail === "string" ? h.detail : "";
      sched.onExecutorExit(str(h, "executor"), (h.code as number | null) ?? null, (h.signal as string | null) ?? null, detail);
      return;
    }
    throw new ProtocolError(`unknown message type '${h.t}' from an agent`);
  }

  /** An agent (re)registered with its slots and its live executors. */
  private register(id: Buffer, agentId: string, h: Header): void {
    const sched = this.ctx.scheduler;
    const old = sched.agents.get(agentId);
    if (old && old.pid === h.pid && old.host === h.host) {
      // The same agent process again (it answered several queued `reregister`s): it is already registered.
      old.lastSeen = Date.now();
      this.ctx.sendTo(id, [encode({ t: "registered", headId: this.ctx.id })]);
      return;
    }
    if (old) sched.onAgentLost(old);
    // A new agent process starts with an empty node cache: it holds no base it may have fed others before.
    this.ctx.objects.trees.drop(agentId);
    const gpus = Array.isArray(h.gpus) ? h.gpus.map(String) : [];
    const total = { cpu: num(h, "cpu"), mem: num(h, "mem"), gpus };
    const agent: AgentRecord = {
      id: agentId,
      routingId: Buffer.from(id),
      host: str(h, "host"),
      pid: num(h, "pid"),
      total,
      free: { cpu: total.cpu, mem: total.mem, gpus: [...gpus] },
      lastSeen: Date.now(),
      executors: new Set(),
      labels: (h.labels as Record<string, string> | undefined) ?? {},
      isolation: isolationOf(h.isolation),
      ...(typeof h.cache === "string" && /^tcp:\/\/\S+$/.test(h.cache) ? { cacheEndpoint: h.cache } : {}),
    };
    sched.agents.set(agentId, agent);
    this.ctx.log(`agent ${agentId} registered: host ${agent.host}, cpu ${total.cpu}, mem ${total.mem}, gpus [${gpus.join(",")}], executors run ${agent.isolation?.mode === "per-app-uid" ? "as a user per app" : "as the agent's own user (any service can read what the agent can)"}`);
    // Its live executors (after a head restart): adopted into restored services, or stopped.
    this.ctx.recovery.adopt(agent, h.executors);
    this.ctx.sendTo(id, [encode({ t: "registered", headId: this.ctx.id })]);
    sched.schedule();
  }

  /** True when `executorId` is one the head placed on `agent` (or one it does not know, whose report changes nothing). */
  private reportsOwn(agent: AgentRecord, executorId: string): boolean {
    const e = this.ctx.scheduler.executors.get(executorId) ?? this.ctx.scheduler.draining.get(executorId);
    return e === undefined || e.agentId === agent.id;
  }

  /** Asks an agent for a free TCP port on its host (a gang's rendezvous). */
  reservePort(agent: AgentRecord): Promise<number> {
    const rid = this.nextRid++;
    return new Promise<Header>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.replies.delete(rid);
        reject(new AgentRequestError(`agent ${agent.id} did not answer 'reserve-port' within ${AGENT_REQUEST_TIMEOUT_MS / 1000} s`, { agentId: agent.id, op: "reserve-port" }));
      }, AGENT_REQUEST_TIMEOUT_MS);
      this.replies.set(rid, { resolve, reject, timer, op: "reserve-port" });
      this.ctx.sendTo(agent.routingId, [encode({ t: "req", rid, op: "reserve-port" })]);
    }).then((h) => num(h, "port"));
  }

  /**
   * Agent liveness, on the head's tick: a silent agent is lost (its executors
   * with it); a suspect one that kept heartbeating is trusted again.
   */
  tick(now: number): void {
    const sched = this.ctx.scheduler;
    for (const agent of [...sched.agents.values()]) {
      const suspect = agent.suspectSince !== undefined;
      if (now - agent.lastSeen > (suspect ? Math.min(SUSPECT_AGENT_TIMEOUT_MS, this.agentTimeoutMs) : this.agentTimeoutMs)) {
        this.ctx.log(`agent ${agent.id} lost: no heartbeat for ${now - agent.lastSeen} ms${suspect ? " (its executors reported it gone)" : ""}`);
        sched.onAgentLost(agent);
      } else if (suspect && agent.lastSeen > agent.suspectSince! + SUSPECT_AGENT_TIMEOUT_MS) {
        agent.suspectSince = undefined; // it kept heartbeating: the report was wrong
      }
    }
  }

  /**
   * Objects under `prefix` of app `app` were deleted ("": the app was
   * released): every agent's node cache drops its copies, so a node frees
   * what the head freed. A notice that does not arrive (an agent
   * re-registering) leaves copies that only the cache's LRU limit bounds.
   */
  dropped(app: string, prefix: string): void {
    for (const agent of this.ctx.scheduler.agents.values()) this.ctx.sendTo(agent.routingId, [encode({ t: "obj-dropped", app, prefix })]);
  }

  /**
   * A part of a base upload reached the head whole (or such an upload was
   * dropped): every agent but `origin` (the uploader's, whose node keeps the
   * files) hears of it, and a node holding the object copies the part
   * before the commit (node-precopy.ts). A notice that does not
   * arrive costs only that overlap: the node fetches the object when read.
   */
  sealed(app: string, notice: SealNotice, origin?: string): void {
    for (const agent of this.ctx.scheduler.agents.values()) if (agent.id !== origin) this.ctx.sendTo(agent.routingId, [encode({ t: "obj-sealed", app, ...notice })]);
  }

  /** Tells every registered agent to exit (the head is shutting down). */
  sayBye(): void {
    for (const agent of this.ctx.scheduler.agents.values()) this.ctx.sendTo(agent.routingId, [encode({ t: "bye" })]);
  }
}

/** The `isolation` of a register message, kept only in its known shape (it is shown in the status). */
function isolationOf(v: unknown): AgentRecord["isolation"] {
  if (typeof v !== "object" || v === null) return undefined;
  const { mode, uids, dir, uid, why } = v as Record<string, unknown>;
  if (mode === "per-app-uid" && typeof uids === "string" && typeof dir === "string") return { mode, uids: uids.slice(0, 64), dir: dir.slice(0, 1024) };
  if (mode === "shared-user" && typeof uid === "number" && typeof why === "string") return { mode, uid, why: why.slice(0, 256) };
  return undefined;
}
