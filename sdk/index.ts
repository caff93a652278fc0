/**
 * hearth's SDK: connect to a head (or the embedded local default), declare
 * services whose executors stay warm between notebook cells, and call them.
 *
 * @example
 * ```ts
 * import { connect } from "hearth";
 * import type { Counter } from "./counter.js";
 *
 * const app = await connect({ name: "demo" });            // embedded default
 * const pool = await app.service<Counter>(
 *   { module: new URL("./counter.js", import.meta.url), export: "Counter" },
 *   { resreq: "cpu=1", warmup: 2, max: 8 },               // a pool that grows under load
 * );
 * await pool.call("add", 5);
 * await pool.withOptions({ timeoutMs: 5_000 }).call("add", 1); // TimeoutError after 5 s
 * const gang = await app.service<Counter>("./counter.js#Counter", { name: "g", warmup: 2, autoscale: false });
 * await gang.broadcast("add", [[1], [2]]);                 // one argument list per rank
 * const ref = await app.objects.put(new Float32Array(1_000_000)); // large data travels by reference
 * await pool.call("add", 1);
 * console.log(await app.status());
 * await app.disconnect();                                   // stays warm for the keep-alive period
 * ```
 */
export { connect, findProvisioner, registerProvisioner, type ConnectOptions } from "./connect.js";
export { App, type AppOptions, type AppStatus, type ServiceOptions, type ServiceRef } from "./runtime/app.js";
export { PENDING_EVERY_MS, type PendingReport } from "./runtime/pending-watch.js";
export type { AppProvision, ProvisionAgent, ProvisionedHead, ProvisionStatus, ProvisionTarget, Provisioner } from "./runtime/provisioner.js";
export { GangHandle, PoolHandle, type GangMember, type MapOptions, type ServiceInfo } from "./runtime/handles.js";
export { CALL_DEADLINE_SLACK_MS, type CallOptions } from "./runtime/head-client.js";
export { DEFAULT_RESOURCES, formatResources, parseMem, parseResreq, type Resources } from "./runtime/resreq.js";
export { gangDistributed } from "./runtime/gang.js";
export type { ExecutorContext, MethodArgs, MethodNames, MethodResult, ServiceInstance } from "./runtime/types.js";
export { ObjectCache, isObjectRef, type ObjectRef, type Fold, type GetOptions, type PutOptions, type WriteOptions } from "./cache/object-cache.js";
export { ensureLocalCluster, findLocalCluster, hearthHome, localProvisioner, stopLocalCluster, type LocalCluster, type LocalClusterOptions, type LocalEngineOptions } from "./engines/local.js";
export { slurmProvisioner, type SlurmConnectOptions, type SlurmEngineConnectOptions, type SlurmStatus } from "./engines/slurm/index.js";
export { AuthError, ConnectError, MESSAGE_LIMIT, MessageTooLargeError, ProtocolError, appToken, credentialFrom, driverCredential, type Credential } from "./wire/index.js";
export {
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
  type ObjectIds,
  type RemoteOrigin,
  type TimeoutOrigin,
} from "./errors/index.js";
