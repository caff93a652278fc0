/**
 * hearth's error tree: HearthError and the domain errors every process
 * raises (services, calls, objects, the head and agents). The errors about
 * the wire itself (ProtocolError, AuthError, ConnectError,
 * MessageTooLargeError) and the wire form of every error live in
 * sdk/wire/errors.ts. This module imports nothing of hearth's, so every
 * layer (wire, cache, tensor, runtime, the head and agents, the kernel) can
 * use it without an import cycle.
 *
 * @example
 * ```ts
 * import { GangFailedError } from "hearth";
 * try { await gang.broadcast("step", args); }
 * catch (err) { if (err instanceof GangFailedError) console.log(err.service, err.rank, err.cause); }
 * ```
 */
export { HearthError, type ErrorIds, type ErrorOptions } from "./hearth-error.js";
export { GangFailedError, ResreqError, ServiceConfigError, ServiceNotFoundError, ServiceStartError } from "./services.js";
export {
  ClosedError,
  ExecutorLostError,
  ExecutorNotFoundError,
  HeadRestartedError,
  QueueFullError,
  RemoteError,
  TimeoutError,
  type RemoteOrigin,
  type TimeoutOrigin,
} from "./calls.js";
export { BackpressureError, BufferLimitError, CacheFullError, ObjectCorruptError, ObjectEvictedError, ObjectNotFoundError, ObjectStorageError, VersionConflictError, type ObjectIds } from "./objects.js";
export { AgentRequestError, ProjectSetupError, StateFileError, UsageError } from "./cluster.js";
