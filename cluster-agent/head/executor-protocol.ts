/**
 * The head's side of the executor protocol: what an executor that proved its
 * credential may send (heartbeats with engine liveness, its agent reported
 * gone, object requests, ready, init failures, results, failed calls), late
 * answers that race their executor's exit report, and executor liveness: the
 * first heartbeat that reports a tensor engine not running recycles the
 * executor. It also keeps where each executor's proven connection is.
 */
import type { Frames } from "../../sdk/wire/channel.js";
import { encode, num, obj, str, type Header } from "../../sdk/wire/codec.js";
import { HeadRestartedError } from "../../sdk/errors/index.js";
import { AuthError, ProtocolError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import type { Peer } from "../../sdk/wire/authenticator.js";
import { SUSPECT_AGENT_TIMEOUT_MS } from "./agent-protocol.js";
import { answerObject, type HeadContext } from "./head-context.js";
import { parseMemoryReport, type EngineReport, type ExecutorRecord } from "./records.js";

const ENGINE_STATES = new Set(["running", "hung", "wedged", "exited"]);

/** Executors: their messages, their connections, and the liveness of their engines. */
export class ExecutorProtocol {
  /** Where each executor's proven connection is (its routing id is random, never `x.<id>`). */
  private readonly routes = new Map<string, Buffer>();

  constructor(private readonly ctx: HeadContext) {}

  /** An executor proved its credential on `route`. */
  bound(executorId: string, route: Buffer): void {
    this.routes.set(executorId, route);
  }

  /** Sends frames to an executor over its proven connection (dropped if it has none yet). */
  toExecutor(executorId: string, frames: Frames): void {
    const route = this.routes.get(executorId);
    if (route) this.ctx.sendTo(route, frames);
  }

  /** Forgets the connections of executors the head no longer tracks (a late one re-proves itself and is told to exit). */
  dropGoneRoutes(forget: (route: Buffer) => void): void {
    const sched = this.ctx.scheduler;
    for (const [id, route] of this.routes) {
      if (sched.executors.has(id) || sched.draining.has(id)) continue;
      this.routes.delete(id);
      forget(route);
    }
  }

  /** Handles one message from a proven executor. */
  onMessage(route: Buffer, peer: Peer, h: Header, frames: Buffer[]): void {
    const head = this.ctx;
    const executorId = peer.id;
    const sched = head.scheduler;
    const late = sched.draining.get(executorId);
    if (late && (h.t === "result" || h.t === "failed")) {
      if (h.t === "result" && frames.length !== 2) throw new ProtocolError("'result' message needs exactly one payload frame");
      // Its exit report overtook this answer: accept it rather than run the call again.
      const call = sched.router.complete(late, num(h, "hid"), h.t === "result" ? { value: frames[1]! } : { error: obj(h, "error") as unknown as WireError });
      const s = sched.services.get(late.serviceId);
      if (call && s) sched.onCallsChanged(s);
      return;
    }
    const e = sched.executors.get(executorId);
    if (!e && head.recovery.active) {
      // Its agent may not have reported it yet: do not tell it to exit. A result is for a call of the old head.
      if (h.t === "ready") head.recovery.noteReady(executorId, num(h, "pid"));
      else if (h.t === "result" || h.t === "failed") sched.router.stats.staleResults++;
      else if (h.t === "req") {
        const error = toWireError(new HeadRestartedError(`the head restarted and does not know executor ${executorId} yet (its agent has not re-registered); retry`, { newHeadId: head.id }));
        head.sendTo(route, [encode({ t: "rep", rid: num(h, "rid"), ok: false, error, head: head.id })]);
      }
      return;
    }
    if (!e) {
      head.log(`message '${h.t}' from unknown executor ${executorId}; telling it to exit`);
      head.sendTo(route, [encode({ t: "exit-now" })]);
      return;
    }
    const s = sched.services.get(e.serviceId)!;
    if (s.app !== peer.app) throw new AuthError(`executor ${executorId} proved a credential of app '${peer.app}', but runs for app '${s.app}'`);
    if (e.unconfirmed) head.recovery.confirm(e);
    switch (h.t) {
      case "hello":
        return; // an adopted executor announcing itself to a restarted head (handled just above)
      case "hb":
        return this.onHeartbeat(e, h.engines, h.memory);
      case "orphaned": {
        // Its agent (its parent) is gone, it says: confirmed by that agent's silence, not taken on its word.
        const agent = sched.agents.get(e.agentId);
        if (agent && agent.suspectSince === undefined) {
          agent.suspectSince = Date.now();
          head.log(`executor ${executorId} reports its agent ${agent.id} gone; the agent is lost unless heard from within ${SUSPECT_AGENT_TIMEOUT_MS} ms`);
        }
        return;
      }
      case "req": {
        const op = str(h, "op");
        if (!op.startsWith("obj-")) throw new ProtocolError(`unknown request op '${op}' from an executor`);
        return answerObject(head, route, num(h, "rid"), () => head.objects.serve(op, s.app, h, frames, "executor", route.toString("latin1"), undefined, e.agentId));
      }
      case "ready":
        sched.onExecutorReady(executorId, num(h, "pid"));
        return;
      case "init-failed":
        sched.onExecutorInitFailed(executorId, obj(h, "error") as unknown as WireError);
        return;
      case "result": {
        if (frames.length !== 2) throw new ProtocolError("'result' message needs exactly one payload frame");
        if (sched.router.complete(e, num(h, "hid"), { value: frames[1]! })) sched.onCallsChanged(s);
        return;
      }
      case "failed":
        return sched.onCallFailed(e, num(h, "hid"), obj(h, "error") as unknown as WireError);
      default:
        throw new ProtocolError(`unknown message type '${h.t}' from an executor`);
    }
  }

  /**
   * An executor heartbeat, with the liveness of its tensor engines. The first
   * report of an engine that is not running recycles the executor: its warm
   * state is gone. A gang fails with GangFailedError naming the rank (its
   * members restart together when it is declared again); a pool requeues the
   * executor's calls and starts a replacement, whose init starts a new engine.
   */
  private onHeartbeat(e: ExecutorRecord, engines: unknown, memory: unknown): void {
    e.heardAt = Date.now();
    e.engines = parseEngineReports(engines);
    e.memory = parseMemoryReport(memory) ?? e.memory;
    if (e.state === "stopping" || e.state === "dead") return;
    const lost = e.engines.find((r) => r.state !== "running");
    const s = this.ctx.scheduler.services.get(e.serviceId);
    if (!lost || !s) return;
    this.ctx.scheduler.recycle(s, e, engineLoss(lost));
  }
}

/** The engines of a heartbeat, malformed entries left out (an executor runs user code; trust nothing). */
export function parseEngineReports(raw: unknown): EngineReport[] {
  if (!Array.isArray(raw)) return [];
  const out: EngineReport[] = [];
  for (const x of raw.slice(0, 64)) {
    if (typeof x !== "object" || x === null) continue;
    const r = x as Record<string, unknown>;
    if (typeof r.state !== "string" || !ENGINE_STATES.has(r.state)) continue;
    out.push({
      pid: typeof r.pid === "number" ? r.pid : null,
      state: r.state as EngineReport["state"],
      silentMs: typeof r.silentMs === "number" ? r.silentMs : 0,
      op: typeof r.op === "string" ? r.op.slice(0, 64) : null,
      detail: typeof r.detail === "string" ? r.detail.slice(0, 400) : null,
    });
  }
  return out;
}

/** Why an engine report means the executor lost its engine, for the error message. */
function engineLoss(r: EngineReport): string {
  const what = r.state === "hung" ? `hung (no heartbeat from its process for ${r.silentMs} ms)` : r.state === "wedged" ? "was wedged (a request passed its deadline)" : "died";
  return `its tensor engine (pid ${r.pid ?? "?"}) ${what}${r.op ? ` during '${r.op}'` : ""}${r.detail ? `: ${r.detail}` : ""}`;
}
