/**
 * What each peer protocol of the head works with. head.ts owns the socket
 * and the authenticator and composes one protocol per proven role
 * (driver-protocol.ts, agent-protocol.ts, executor-protocol.ts); each gets
 * this small context instead of the head itself and never imports head.ts,
 * the way kernel/ hands its handler an interface rather than the kernel. So
 * splitting the head by role opens no import circle (eslint.config.js keeps
 * it that way).
 */
import type { Frames } from "../../sdk/wire/channel.js";
import { encode } from "../../sdk/wire/codec.js";
import { toWireError } from "../../sdk/wire/errors.js";
import type { ObjectService, ServiceReply } from "../object-service.js";
import type { Recovery } from "./recovery.js";
import type { Scheduler } from "./scheduler.js";

/** The registry, scheduler and transport a role's protocol may use. */
export interface HeadContext {
  /** This head instance's id; every reply carries it, so a peer can tell that its head restarted. */
  readonly id: string;
  /** The registry (agents, apps, services, executors) and the scheduling around it. */
  readonly scheduler: Scheduler;
  /** Adoption of reported executors after a head restart. */
  readonly recovery: Recovery;
  /** The object cache's request handler. */
  readonly objects: ObjectService;
  /** Sends frames to a proven peer by its routing id. */
  sendTo(route: Buffer, frames: Frames): void;
  /** The head's log (lines are truncated there). */
  log(line: string): void;
  /** Apps or services changed: persist them, if the head has a data dir. */
  saveState(): void;
}

/**
 * Runs an object request and answers it: the value with the reply's frames,
 * or the error it threw. A reply with object data may wait for its
 * connection to read what it was sent before (ObjectService.serve).
 */
export function answerObject(ctx: Pick<HeadContext, "id" | "sendTo">, route: Buffer, rid: number, work: () => Promise<ServiceReply>): void {
  work().then(
    (r) => ctx.sendTo(route, [encode({ t: "rep", rid, ok: true, value: r.value, head: ctx.id }), ...(r.frames ?? [])]),
    (err: unknown) => ctx.sendTo(route, [encode({ t: "rep", rid, ok: false, error: toWireError(err), head: ctx.id })]),
  );
}
