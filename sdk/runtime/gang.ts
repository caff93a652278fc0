/**
 * What a gang member hands its tensor engine to join the gang's process
 * group: rank, world size, and the tcp:// rendezvous signed with the gang's
 * key (torch's TCPStore authenticates nobody; docs/architecture.md, "Security
 * model").
 */
import { ServiceConfigError } from "../errors/index.js";
import type { DistributedOptions } from "../tensor/types.js";
import type { ExecutorContext } from "./types.js";

/** The engine's `trainInit` membership of this gang member; throws when the executor is not in a gang. */
export function gangDistributed(ctx: ExecutorContext, backend?: "gloo" | "nccl", collectiveTimeoutMs?: number): DistributedOptions {
  if (ctx.rank === null || ctx.worldSize === null || ctx.rendezvous === null) {
    throw new ServiceConfigError(`service '${ctx.service}' is not a gang (declare it with autoscale: false); only gang members join a process group`);
  }
  const { host, port, key } = ctx.rendezvous;
  return { rank: ctx.rank, worldSize: ctx.worldSize, initMethod: `tcp://${host}:${port}`, rendezvousKey: key, backend, collectiveTimeoutMs };
}
