/**
 * The error tree shared by every hearth process. Each error carries a stable
 * `name` and the ids that matter (service, executor, call), so a caller can
 * branch on `instanceof` locally and on `name` across the wire.
 */

/** Base class of every error hearth raises on purpose. */
export class HearthError extends Error {
  override name = "HearthError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A resource request string (`"cpu=8,mem=64g,gpu=1"`) is malformed or can never be satisfied. */
export class ResreqError extends HearthError {
  override name = "ResreqError";
}

/** A service declaration or option is invalid (bad module, export, warmup, max…). */
export class ServiceConfigError extends HearthError {
  override name = "ServiceConfigError";
}

/** A message exceeds the call message limit; large data travels as object references. */
export class MessageTooLargeError extends HearthError {
  override name = "MessageTooLargeError";
  constructor(
    readonly size: number,
    readonly limit: number,
    what: string,
  ) {
    super(
      `${what} is ${formatBytes(size)}, over the ${formatBytes(limit)} call message limit. ` +
        `Put large data in the object cache and pass the ObjectRef instead.`,
    );
  }
}

/** The wire carried something that is not a valid hearth message. */
export class ProtocolError extends HearthError {
  override name = "ProtocolError";
}

/** A peer could not prove a credential, or its role may not do what it asked (see auth.ts). */
export class AuthError extends HearthError {
  override name = "AuthError";
}

/** No head answered, or the connection to it was lost. */
export class ConnectError extends HearthError {
  override name = "ConnectError";
}

/** Where a timed-out operation was: the ids that matter (all optional: a request to the head has none). */
export interface TimeoutOrigin {
  /** The service the call or start belonged to. */
  service?: string;
  /** The executor that held the call (and was recycled), if it had reached one. */
  executorId?: string;
  /** The driver's call id. */
  callId?: number;
  cause?: unknown;
}

/**
 * An operation did not finish within its deadline. A call's TimeoutError names
 * its service, call id and the executor that was running it (that executor is
 * killed and replaced, since it may be wedged).
 */
export class TimeoutError extends HearthError {
  override name = "TimeoutError";
  readonly service?: string;
  readonly executorId?: string;
  readonly callId?: number;
  constructor(message: string, origin: TimeoutOrigin = {}) {
    super(message, origin.cause === undefined ? undefined : { cause: origin.cause });
    this.service = origin.service;
    this.executorId = origin.executorId;
    this.callId = origin.callId;
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
  constructor(
    message: string,
    readonly oldHeadId: string,
    readonly newHeadId: string,
  ) {
    super(message);
  }
}

/** A service's queue is full (its `maxQueued`): wait for results before sending more (backpressure). */
export class QueueFullError extends HearthError {
  override name = "QueueFullError";
}

/** The handle, app or client was used after `close()`. */
export class ClosedError extends HearthError {
  override name = "ClosedError";
}

/** A named service does not exist (or no longer exists) in the app. */
export class ServiceNotFoundError extends HearthError {
  override name = "ServiceNotFoundError";
  constructor(readonly service: string) {
    super(`no service named '${service}' in this app; declare it with app.service(...)`);
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
  readonly remoteName: string;
  readonly remoteMessage: string;
  readonly remoteStack: string;
  readonly origin: RemoteOrigin;
  constructor(remoteName: string, remoteMessage: string, remoteStack: string, origin: RemoteOrigin) {
    const where = [origin.service, origin.method].filter(Boolean).join(".");
    super(`${remoteName}: ${remoteMessage}${where ? ` (in ${where} on executor ${origin.executorId ?? "?"})` : ""}`);
    this.remoteName = remoteName;
    this.remoteMessage = remoteMessage;
    this.remoteStack = remoteStack;
    this.origin = origin;
    this.stack = `${this.name}: ${this.message}\n    --- remote stack ---\n${remoteStack}\n    --- local stack ---\n${this.stack?.split("\n").slice(1).join("\n") ?? ""}`;
  }
}

/** A call could not complete because every executor that tried it died. */
export class ExecutorLostError extends HearthError {
  override name = "ExecutorLostError";
}

/** A call named an executor the service does not have (it exited, or never belonged to it). */
export class ExecutorNotFoundError extends HearthError {
  override name = "ExecutorNotFoundError";
}

/** A gang lost a member; the whole gang fails and can be declared again. */
export class GangFailedError extends HearthError {
  override name = "GangFailedError";
  constructor(
    message: string,
    readonly service: string,
    readonly rank: number,
  ) {
    super(message);
  }
}

/** A service's executors could not start (init threw, the module failed to load…). */
export class ServiceStartError extends HearthError {
  override name = "ServiceStartError";
}

/** A write's `ifVersion` precondition did not hold: someone else wrote first. */
export class VersionConflictError extends HearthError {
  override name = "VersionConflictError";
  constructor(
    message: string,
    readonly key: string,
    readonly expected: number,
    readonly actual: number,
  ) {
    super(message);
  }
}

/** No object with that key exists in the app (or it was deleted). */
export class ObjectNotFoundError extends HearthError {
  override name = "ObjectNotFoundError";
}

/** An object was dropped to make room, and there was no data dir to reload it from. */
export class ObjectEvictedError extends HearthError {
  override name = "ObjectEvictedError";
}

/** A put cannot fit in the cache's memory limit even after evicting everything evictable. */
export class CacheFullError extends HearthError {
  override name = "CacheFullError";
}

/** The plain-data form of an error as it travels on the wire. */
export interface WireError {
  name: string;
  message: string;
  stack?: string;
  /** For RemoteError: the user's error class name and stack. */
  remoteName?: string;
  remoteStack?: string;
  service?: string;
  executorId?: string;
  method?: string;
  /** For TimeoutError: the driver's call id. */
  callId?: number;
  rank?: number;
  size?: number;
  limit?: number;
  key?: string;
  expected?: number;
  actual?: number;
}

/** Turns any thrown value into its wire form. */
export function toWireError(err: unknown): WireError {
  if (err instanceof RemoteError) {
    return {
      name: err.name,
      message: err.remoteMessage,
      remoteName: err.remoteName,
      remoteStack: err.remoteStack,
      ...err.origin,
    };
  }
  if (err instanceof VersionConflictError) {
    return { name: err.name, message: err.message, key: err.key, expected: err.expected, actual: err.actual };
  }
  if (err instanceof TimeoutError) {
    return { name: err.name, message: err.message, service: err.service, executorId: err.executorId, callId: err.callId };
  }
  if (err instanceof GangFailedError) {
    return { name: err.name, message: err.message, service: err.service, rank: err.rank };
  }
  if (err instanceof Error) return { name: err.name, message: err.message, stack: err.stack };
  return { name: "Error", message: String(err) };
}

const KNOWN: Record<string, new (message: string) => HearthError> = {
  HearthError,
  ResreqError,
  ServiceConfigError,
  ProtocolError,
  AuthError,
  ConnectError,
  ClosedError,
  ExecutorLostError,
  ExecutorNotFoundError,
  QueueFullError,
  ServiceStartError,
  ObjectNotFoundError,
  ObjectEvictedError,
  CacheFullError,
};

/** Rebuilds a local Error subclass from its wire form. */
export function fromWireError(w: WireError): Error {
  if (w.name === "RemoteError") {
    return new RemoteError(w.remoteName ?? "Error", w.message, w.remoteStack ?? "", {
      service: w.service,
      executorId: w.executorId,
      method: w.method,
    });
  }
  if (w.name === "ServiceStartError" && w.remoteName) {
    return new ServiceStartError(w.message, {
      cause: new RemoteError(w.remoteName, w.message, w.remoteStack ?? "", { service: w.service, executorId: w.executorId }),
    });
  }
  if (w.name === "VersionConflictError") return new VersionConflictError(w.message, w.key ?? "?", w.expected ?? -1, w.actual ?? -1);
  if (w.name === "TimeoutError") return new TimeoutError(w.message, { service: w.service, executorId: w.executorId, callId: w.callId });
  if (w.name === "GangFailedError") return new GangFailedError(w.message, w.service ?? "?", w.rank ?? -1);
  if (w.name === "MessageTooLargeError" && w.size !== undefined && w.limit !== undefined) {
    const e = new MessageTooLargeError(w.size, w.limit, "message");
    e.message = w.message;
    return e;
  }
  if (w.name === "ServiceNotFoundError") {
    const e = new ServiceNotFoundError(w.service ?? "?");
    e.message = w.message;
    return e;
  }
  const Ctor = KNOWN[w.name];
  if (Ctor) return new Ctor(w.message);
  return new HearthError(`${w.name}: ${w.message}`);
}

/** Longest log line the head and agents write; peers control much of what is logged (names, bad fields). */
export const LOG_LINE_LIMIT = 4096;

/** Cuts `line` to LOG_LINE_LIMIT characters, saying how much was dropped, and keeps it on one line. */
export function truncateLogLine(line: string, limit = LOG_LINE_LIMIT): string {
  const flat = line.replace(/[\r\n]+/g, " ⏎ ");
  return flat.length <= limit ? flat : `${flat.slice(0, limit)}… [${flat.length - limit} more characters]`;
}

/** Human-readable byte count: 131072 → "128 KiB". */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${units[i]}`;
}
