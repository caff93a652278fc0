/**
 * The head's side of the executor protocol: what an executor that proved its
 * credential may send (heartbeats with engine liveness, its agent reported
 * gone, object requests, ready, init failures, results, failed calls), and
 * late answers that race their executor's exit report.
 */
import { encode, num, obj, str, type Header } from "../../sdk/wire/codec.js";
import { HeadRestartedError } from "../../sdk/errors/index.js";
import { AuthError, ProtocolError, toWireError, type WireError } from "../../sdk/wire/errors.js";
import type { Peer } from "../../sdk/wire/authenticator.js";
import type { ObjectService, ServiceReply } from "../object-service.js";
import type { Recovery } from "./recovery.js";
import type { Scheduler } from "./scheduler.js";

/** An executor's report that its agent is gone ends that agent after this much more silence. */
export const SUSPECT_AGENT_TIMEOUT_MS = 2_500;

/** What the executor protocol needs of the head. */
export interface ExecutorPeerHost {
  readonly id: string;
  readonly scheduler: Scheduler;
  readonly recovery: Recovery;
  readonly objects: ObjectService;
  sendTo(route: Buffer, frames: Buffer[]): void;
  log(line: string): void;
  answerObject(route: Buffer, rid: number, work: () => ServiceReply): void;
}

/** Handles one message from a proven executor. */
export function onExecutorMessage(head: ExecutorPeerHost, route: Buffer, peer: Peer, h: Header, frames: Buffer[]): void {
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
      return sched.deadlines.onExecutorHeartbeat(e, h.engines);
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
      return head.answerObject(route, num(h, "rid"), () => head.objects.handle(op, s.app, h, frames, "executor"));
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
