/**
 * Types shared by drivers and service classes: what an executor tells a
 * service in `init`, and how handle methods are typed from a service class.
 */
import type { ObjectCache } from "../cache/object-cache.js";
import type { Resources } from "./resreq.js";

/** What a service instance learns about where it runs, passed to `init(ctx)`. */
export interface ExecutorContext {
  executorId: string;
  agentId: string;
  /** The node's address as other nodes reach it. */
  host: string;
  app: string;
  service: string;
  /** GPU ids this executor may use (also in CUDA_VISIBLE_DEVICES). */
  gpus: string[];
  resources: Resources;
  concurrency: number;
  /** Gang members only: rank (by sorted executor id) and world size. */
  rank: number | null;
  worldSize: number | null;
  /**
   * Gang members only: rank 0's host and a port reserved for collectives (also
   * MASTER_ADDR/MASTER_PORT), and `key` (hex), a secret only this gang's members
   * hold: pass it as the engine's `rendezvousKey` (gangDistributed does) so the
   * rendezvous is signed; torch's TCPStore alone lets any local process write to it.
   */
  rendezvous: { host: string; port: number; key: string } | null;
  /** The app's object cache: reads go through this node's agent, writes to the head. */
  objects: ObjectCache;
}

/**
 * A service class: `new Cls()`, then `await init(ctx)` once (the warm state),
 * then calls to its methods, then `close()` on shutdown.
 */
export interface ServiceInstance {
  init?(ctx: ExecutorContext): unknown;
  close?(): unknown;
}

/** Names of the callable methods of a service (not init/close, not `_private`). */
export type MethodNames<S> = {
  [K in keyof S]: S[K] extends (...args: any[]) => unknown ? (K extends "init" | "close" | `_${string}` ? never : K) : never;
}[keyof S] &
  string;

/** Arguments of a service method. */
export type MethodArgs<S, M extends MethodNames<S>> = S[M] extends (...args: infer A) => unknown ? A : never;

/** What a call of a service method resolves to. */
export type MethodResult<S, M extends MethodNames<S>> = S[M] extends (...args: any[]) => infer R ? Awaited<R> : never;
