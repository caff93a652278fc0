/**
 * Errors a call (or a request) ends with: past its deadline, lost with its
 * executor, refused by a full queue, pinned to an executor that does not
 * exist, thrown by user code, or cut off by a close or a head restart. Each
 * names the service, executor and call it is about, where there is one.
 */
import { HearthError, type ErrorIds, type ErrorOptions } from "./hearth-error.js";

/** Where a timed-out operation was: the ids that matter (all optional: a request to the head has none). */
export interface TimeoutOrigin extends ErrorOptions {
  /** The service the call or start belonged to. */
  service?: string;
  /** The executor that held the call (and was recycled), if it had reached one. */
  executorId?: string;
  /** The driver's call id. */
  callId?: number;
  /** The request op that got no answer (a request, not a call). */
  op?: string;
}

/**
 * An operation did not finish within its deadline. A call's TimeoutError names
 * its service, call id and the executor that was running it (that executor is
 * killed and replaced, since it may be wedged).
 */
export class TimeoutError extends HearthError {
  override name = "TimeoutError";
  declare readonly service?: string;
  declare readonly executorId?: string;
  declare readonly callId?: number;
  declare readonly op?: string;
  constructor(message: string, origin: TimeoutOrigin = {}) {
    super(message, origin, { service: origin.service, executorId: origin.executorId, callId: origin.callId, op: origin.op });
  }
}

/** A call could not complete because every executor that tried it died (or none can run it any more). */
export class ExecutorLostError extends HearthError {
  override name = "ExecutorLostError";
  /** The service the call was for. */
  declare readonly service: string;
  /** The driver's call id. */
  declare readonly callId: number;
  /** The last executor that died running it, if it had reached one. */
  declare readonly executorId?: string;
  constructor(message: string, fields: { service: string; callId: number; executorId?: string } & ErrorOptions) {
    super(message, fields, { service: fields.service, callId: fields.callId, executorId: fields.executorId });
  }
}

/** A call named an executor the service does not have (it exited, or never belonged to it). */
export class ExecutorNotFoundError extends HearthError {
  override name = "ExecutorNotFoundError";
  declare readonly service: string;
  declare readonly executorId: string;
  constructor(message: string, fields: { service: string; executorId: string } & ErrorOptions) {
    super(message, fields, { service: fields.service, executorId: fields.executorId });
  }
}

/** A service's queue is full (its `maxQueued`): wait for results before sending more (backpressure). */
export class QueueFullError extends HearthError {
  override name = "QueueFullError";
  declare readonly service: string;
  /** The service's maxQueued. */
  declare readonly limit: number;
  constructor(message: string, fields: { service: string; limit: number } & ErrorOptions) {
    super(message, fields, { service: fields.service, limit: fields.limit });
  }
}

/** The handle, app, client or service was closed (or stopped) while work was pending, or used after. */
export class ClosedError extends HearthError {
  override name = "ClosedError";
  /** The service that was stopped, when a stop ended the work. */
  declare readonly service?: string;
  constructor(message: string, fields: { service?: string } & ErrorOptions = {}) {
    super(message, fields, { service: fields.service });
  }
}

/**
 * The head this driver talked to was replaced by another instance (it
 * restarted): calls and requests pending on the old one can never be answered.
 * Retryable: `connect()` again and redeclare services, then retry the work.
 */
export class HeadRestartedError extends HearthError {
  override name = "HeadRestartedError";
  /** Always true: the work was not lost by the callee's fault; redo it on a fresh connection. */
  readonly retryable = true;
  /** The head instance the work was sent to, when the caller knows it. */
  declare readonly oldHeadId?: string;
  /** The head instance that answers now. */
  declare readonly newHeadId: string;
  constructor(message: string, fields: { oldHeadId?: string; newHeadId: string } & ErrorOptions) {
    super(message, fields, { oldHeadId: fields.oldHeadId, newHeadId: fields.newHeadId });
  }
}

/** Fields that identify where a remote failure happened. */
export interface RemoteOrigin {
  service?: string;
  executorId?: string;
  method?: string;
  callId?: number;
}

/** An exception thrown by user code inside an executor, carried back with its remote stack. */
export class RemoteError extends HearthError {
  override name = "RemoteError";
  /** The user's error class name (`TypeError`, `ValueError`…). */
  declare readonly remoteName: string;
  declare readonly remoteMessage: string;
  declare readonly remoteStack: string;
  declare readonly origin: RemoteOrigin;
  constructor(remoteName: string, remoteMessage: string, remoteStack: string, origin: RemoteOrigin, options?: ErrorOptions) {
    const where = [origin.service, origin.method].filter(Boolean).join(".");
    super(`${remoteName}: ${remoteMessage}${where ? ` (in ${where} on executor ${origin.executorId ?? "?"})` : ""}`, options);
    this.remoteName = remoteName;
    this.remoteMessage = remoteMessage;
    this.remoteStack = remoteStack;
    this.origin = origin;
    this.stack = `${this.name}: ${this.message}\n    --- remote stack ---\n${remoteStack}\n    --- local stack ---\n${this.stack?.split("\n").slice(1).join("\n") ?? ""}`;
  }
  override ids(): ErrorIds {
    return { remoteName: this.remoteName, service: this.origin.service, executorId: this.origin.executorId, method: this.origin.method, callId: this.origin.callId };
  }
}
