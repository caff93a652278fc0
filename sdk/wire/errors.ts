/**
 * The errors about the wire itself (a message that is not hearth's, one over
 * the size limit, a peer that cannot prove a credential, no head to talk to)
 * and the wire form of every hearth error. The domain errors (services,
 * calls, objects, head and agents) live in sdk/errors/; the wire form lives
 * here, above them, because it must know every class (these included) to
 * rebuild the one a peer raised, and sdk/errors imports nothing of hearth's.
 */
import {
  AgentRequestError,
  BackpressureError,
  BufferLimitError,
  CacheFullError,
  ClosedError,
  ExecutorLostError,
  ExecutorNotFoundError,
  GangFailedError,
  HeadRestartedError,
  HearthError,
  ObjectCorruptError,
  ObjectEvictedError,
  ObjectNotFoundError,
  ObjectStorageError,
  ProjectSetupError,
  QueueFullError,
  RemoteError,
  ResreqError,
  ServiceConfigError,
  ServiceNotFoundError,
  ServiceStartError,
  StateFileError,
  TimeoutError,
  UsageError,
  VersionConflictError,
  type ErrorIds,
  type ErrorOptions,
} from "../errors/index.js";
import { formatBytes } from "../format.js";

/** A message exceeds the call message limit; large data travels as object references. */
export class MessageTooLargeError extends HearthError {
  override name = "MessageTooLargeError";
  constructor(
    readonly size: number,
    readonly limit: number,
    what: string,
    options?: ErrorOptions,
  ) {
    super(
      `${what} is ${formatBytes(size)}, over the ${formatBytes(limit)} call message limit. ` +
        `Put large data in the object cache and pass the ObjectRef instead.`,
      options,
    );
  }
  override ids(): ErrorIds {
    return { size: this.size, limit: this.limit };
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

/**
 * The plain-data form of an error as it travels on the wire: its class name,
 * message, the ids its class carries (HearthError.ids(), flat) and its cause,
 * in the same form.
 */
export interface WireError {
  name: string;
  message: string;
  /** Only for errors that are not hearth's (a bug somewhere): where it was thrown. */
  stack?: string;
  /** For RemoteError: the user's error class name and stack. */
  remoteName?: string;
  remoteStack?: string;
  service?: string;
  executorId?: string;
  method?: string;
  callId?: number;
  rank?: number;
  size?: number;
  limit?: number;
  /** For BackpressureError: the bytes a connection had not acknowledged reading. */
  unread?: number;
  key?: string;
  app?: string;
  expected?: number;
  actual?: number;
  resreq?: string;
  op?: string;
  /** For ServiceConfigError: the declaration's field out of bounds. */
  field?: string;
  /** For ObjectStorageError: the file system's error code (ENOSPC, EROFS…). */
  code?: string;
  /** For ObjectCorruptError: the part and the offset of the chunk that failed its check. */
  part?: number;
  offset?: number;
  agentId?: string;
  file?: string;
  flag?: string;
  project?: string;
  oldHeadId?: string;
  newHeadId?: string;
  /** For HeadRestartedError: always true. */
  retryable?: boolean;
  /** What this error was raised because of, in the same form (at most MAX_CAUSE_DEPTH levels). */
  cause?: WireError;
}

/** How many causes deep the wire form goes; deeper ones are cut (a cause chain is peer data too). */
export const MAX_CAUSE_DEPTH = 4;

/** Turns any thrown value into its wire form, ids and cause chain included. */
export function toWireError(err: unknown, depth = 0): WireError {
  const base = wireOf(err);
  const cause = err instanceof Error ? err.cause : undefined;
  if (cause !== undefined && depth < MAX_CAUSE_DEPTH) base.cause = toWireError(cause, depth + 1);
  return base;
}

function wireOf(err: unknown): WireError {
  if (err instanceof RemoteError) {
    return { name: err.name, message: err.remoteMessage, remoteName: err.remoteName, remoteStack: err.remoteStack, ...defined(err.ids()) };
  }
  if (err instanceof HeadRestartedError) return { name: err.name, message: err.message, ...defined(err.ids()), retryable: true };
  // A hearth error says what failed with its name, ids and message; the head's own stack helps no driver.
  if (err instanceof HearthError) return { name: err.name, message: err.message, ...defined(err.ids()) };
  if (err instanceof Error) return { name: err.name, message: err.message, stack: err.stack };
  return { name: "Error", message: String(err) };
}

function defined(ids: ErrorIds): Record<string, string | number> {
  const out: Record<string, string | number> = {};
  for (const [k, v] of Object.entries(ids)) if (v !== undefined) out[k] = v;
  return out;
}

// Peer data: a missing or mistyped id reads as "?" or -1 rather than failing the decode of an error.
const s = (v: unknown): string => (typeof v === "string" ? v : "?");
const n = (v: unknown): number => (typeof v === "number" ? v : -1);
const os = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const on = (v: unknown): number | undefined => (typeof v === "number" ? v : undefined);

type Decode = (w: WireError, o: ErrorOptions) => HearthError;

/** How each class is rebuilt from its wire form: its ids, typed, and its cause. */
const DECODE: Record<string, Decode> = {
  HearthError: (w, o) => new HearthError(w.message, o),
  ProtocolError: (w, o) => new ProtocolError(w.message, o),
  AuthError: (w, o) => new AuthError(w.message, o),
  ConnectError: (w, o) => new ConnectError(w.message, o),
  MessageTooLargeError: (w, o) => Object.assign(new MessageTooLargeError(n(w.size), n(w.limit), "message", o), { message: w.message }),
  ResreqError: (w, o) => new ResreqError(w.message, { resreq: s(w.resreq), service: os(w.service), ...o }),
  ServiceConfigError: (w, o) => new ServiceConfigError(w.message, { service: os(w.service), field: os(w.field), ...o }),
  ServiceNotFoundError: (w, o) => new ServiceNotFoundError(w.message, { service: s(w.service), app: os(w.app), ...o }),
  ServiceStartError: (w, o) => new ServiceStartError(w.message, { service: s(w.service), executorId: os(w.executorId), ...o }),
  GangFailedError: (w, o) => new GangFailedError(w.message, { service: s(w.service), rank: n(w.rank), executorId: os(w.executorId), ...o }),
  TimeoutError: (w, o) => new TimeoutError(w.message, { service: os(w.service), executorId: os(w.executorId), callId: on(w.callId), op: os(w.op), ...o }),
  ExecutorLostError: (w, o) => new ExecutorLostError(w.message, { service: s(w.service), callId: n(w.callId), executorId: os(w.executorId), ...o }),
  ExecutorNotFoundError: (w, o) => new ExecutorNotFoundError(w.message, { service: s(w.service), executorId: s(w.executorId), ...o }),
  QueueFullError: (w, o) => new QueueFullError(w.message, { service: s(w.service), limit: n(w.limit), ...o }),
  ClosedError: (w, o) => new ClosedError(w.message, { service: os(w.service), ...o }),
  HeadRestartedError: (w, o) => new HeadRestartedError(w.message, { oldHeadId: os(w.oldHeadId), newHeadId: s(w.newHeadId), ...o }),
  RemoteError: (w, o) =>
    new RemoteError(s(w.remoteName ?? "Error"), w.message, os(w.remoteStack) ?? "", { service: os(w.service), executorId: os(w.executorId), method: os(w.method), callId: on(w.callId) }, o),
  VersionConflictError: (w, o) => new VersionConflictError(w.message, { key: s(w.key), app: os(w.app), expected: n(w.expected), actual: n(w.actual), ...o }),
  ObjectNotFoundError: (w, o) => new ObjectNotFoundError(w.message, { key: s(w.key), app: os(w.app), ...o }),
  ObjectEvictedError: (w, o) => new ObjectEvictedError(w.message, { key: s(w.key), app: os(w.app), ...o }),
  ObjectStorageError: (w, o) => new ObjectStorageError(w.message, { key: s(w.key), app: os(w.app), op: s(w.op), code: s(w.code), ...o }),
  ObjectCorruptError: (w, o) => new ObjectCorruptError(w.message, { key: s(w.key), app: os(w.app), part: n(w.part), offset: n(w.offset), ...o }),
  BackpressureError: (w, o) => new BackpressureError(w.message, { unread: n(w.unread), limit: n(w.limit), ...o }),
  BufferLimitError: (w, o) => new BufferLimitError(w.message, { key: s(w.key), app: os(w.app), size: n(w.size), limit: n(w.limit), ...o }),
  CacheFullError: (w, o) => new CacheFullError(w.message, { key: s(w.key), app: os(w.app), size: n(w.size), limit: n(w.limit), ...o }),
  StateFileError: (w, o) => new StateFileError(w.message, { file: s(w.file), ...o }),
  AgentRequestError: (w, o) => new AgentRequestError(w.message, { agentId: s(w.agentId), op: s(w.op), ...o }),
  UsageError: (w, o) => new UsageError(w.message, { flag: s(w.flag), ...o }),
  ProjectSetupError: (w, o) => new ProjectSetupError(w.message, { project: s(w.project), agentId: s(w.agentId), executorId: s(w.executorId), ...o }),
};

/** The names of every class fromWireError rebuilds as itself (tests check each one round-trips). */
export const WIRE_ERROR_NAMES: readonly string[] = Object.keys(DECODE);

/**
 * Rebuilds an error from its wire form: the same class with the same ids, and
 * its cause chain. A name hearth does not know (a user's or Node's error that
 * reached the wire) comes back as a HearthError whose message starts with
 * that name; as a cause it keeps the name itself.
 */
export function fromWireError(w: WireError, depth = 0): Error {
  const message = typeof w?.message === "string" ? w.message : String(w?.message ?? "");
  const name = typeof w?.name === "string" ? w.name : "Error";
  const wire = { ...w, name, message };
  const raw = w?.cause;
  const cause = raw !== null && typeof raw === "object" && depth < MAX_CAUSE_DEPTH ? fromWireError(raw, depth + 1) : undefined;
  const o: ErrorOptions = cause === undefined ? {} : { cause };
  const decode = Object.hasOwn(DECODE, name) ? DECODE[name] : undefined;
  if (decode) return decode(wire, o);
  if (depth === 0) return new HearthError(`${name}: ${message}`, o);
  // A foreign cause (a TypeError the head hit, a user's class): keep its name and message as they were.
  const foreign = new HearthError(message, o);
  foreign.name = name;
  if (typeof w.stack === "string") foreign.stack = w.stack;
  return foreign;
}
