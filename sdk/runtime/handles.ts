/**
 * Service handles. Their types carry what a service can do: a pool has
 * `call` and `map` (any executor may answer), a gang has `broadcast` and
 * `members` (every rank answers), and neither has the other's methods.
 *
 * Deadlines and cancellation: methods keep their positional arguments typed
 * from the service class, so options cannot trail them. Instead
 * `withOptions({ timeoutMs, signal })` returns a view of the same service
 * whose calls carry them:
 *
 * ```ts
 * const r = await pool.withOptions({ timeoutMs: 5_000 }).call("search", query);
 * ```
 */
import type { CallOptions, HeadClient } from "./head-client.js";
import type { MethodArgs, MethodNames, MethodResult } from "./types.js";

/** The description of a service the head sends back. */
export interface ServiceInfo {
  id: string;
  name: string;
  kind: "pool" | "gang";
  state: "pending" | "starting" | "ready" | "failed" | "stopped";
  resreq: string;
  warmup: number;
  max: number | null;
  concurrency: number;
  /** The service's default call deadline (ms), null when calls have none unless given. */
  callTimeoutMs?: number | null;
  /** How long an executor may take to become ready before it is killed and the service fails. */
  initTimeoutMs?: number;
  /** Calls that may wait for an executor at most (QueueFullError beyond). */
  maxQueued?: number;
  module: string;
  export: string;
  members?: GangMember[];
  rendezvous?: { host: string; port: number };
  error?: { name: string; message: string };
}

/** One member of a gang. */
export interface GangMember {
  rank: number;
  executorId: string;
  agentId: string;
  host: string;
  gpus: string[];
}

/** One executor of a pool, as `members()` lists it. */
export interface PoolMember {
  executorId: string;
  agentId: string;
  state: string;
  pid: number | null;
  gpus: string[];
}

/** Options of `PoolHandle.map`. */
export interface MapOptions {
  /** Calls in flight at most (backpressure). Default 64. */
  window?: number;
}

/** What both handle kinds share. */
abstract class BaseHandle {
  constructor(
    protected readonly client: HeadClient,
    protected infoValue: ServiceInfo,
    /** Options every call through this handle carries (see withOptions). */
    protected readonly callOptions: CallOptions = {},
  ) {}

  /** The options of this view merged with `opts` (later wins). */
  protected merged(opts: CallOptions): CallOptions {
    return { ...this.callOptions, ...opts };
  }

  /** The service's name in its app. */
  get name(): string {
    return this.infoValue.name;
  }

  /** The service as the head last described it. */
  get info(): ServiceInfo {
    return this.infoValue;
  }

  /** Stops the service: its executors run `close()` and exit; pending calls fail. */
  async stop(): Promise<void> {
    await this.client.control("stop-service", { service: this.infoValue.name });
  }
}

/** A pool of interchangeable executors that grows while calls pend. */
export class PoolHandle<S = any> extends BaseHandle {
  readonly kind = "pool" as const;

  /** A view of this pool whose calls (and `map`) carry `opts`: a deadline (TimeoutError) and/or an abort signal. */
  withOptions(opts: CallOptions): PoolHandle<S> {
    return new PoolHandle<S>(this.client, this.infoValue, this.merged(opts));
  }

  /** Calls `method` on some executor of the pool. */
  call<M extends MethodNames<S>>(method: M, ...args: MethodArgs<S, M>): Promise<MethodResult<S, M>> {
    return this.client.call(this.infoValue.id, method, args, undefined, this.callOptions) as Promise<MethodResult<S, M>>;
  }

  /** The pool's executors that take calls now (ready or busy), by executor id. */
  async members(): Promise<PoolMember[]> {
    const info = (await this.client.control("members", { service: this.infoValue.name })) as { members: PoolMember[] };
    return info.members;
  }

  /**
   * Calls `method` on one named executor (from `members()`), e.g. to check a
   * property of every member. The call waits for that executor only and fails
   * with ExecutorLostError if it dies, instead of moving elsewhere.
   */
  callMember<M extends MethodNames<S>>(executorId: string, method: M, ...args: MethodArgs<S, M>): Promise<MethodResult<S, M>> {
    return this.client.call(this.infoValue.id, method, args, undefined, this.callOptions, executorId) as Promise<MethodResult<S, M>>;
  }

  /** Calls `method` once on every current member; results in `members()` order, each with its executor id. */
  async broadcastMembers<M extends MethodNames<S>>(method: M, ...args: MethodArgs<S, M>): Promise<Array<{ executorId: string; result: MethodResult<S, M> }>> {
    const members = await this.members();
    return Promise.all(members.map(async (m) => ({ executorId: m.executorId, result: await this.callMember(m.executorId, method, ...args) })));
  }

  /**
   * Calls `method` once per element of `argsList` (an iterable or async
   * iterable of argument arrays), keeping at most `window` calls in flight,
   * and yields results in input order. Stops at the first failed call.
   */
  async *map<M extends MethodNames<S>>(
    method: M,
    argsList: Iterable<MethodArgs<S, M>> | AsyncIterable<MethodArgs<S, M>>,
    opts: MapOptions = {},
  ): AsyncGenerator<MethodResult<S, M>, void, undefined> {
    const window = Math.max(1, opts.window ?? 64);
    const inflight: Array<Promise<MethodResult<S, M>>> = [];
    for await (const args of argsList) {
      const p = this.call(method, ...args);
      p.catch(() => undefined); // observed when its turn comes; avoid an unhandled rejection before that
      inflight.push(p);
      if (inflight.length >= window) yield await inflight.shift()!;
    }
    while (inflight.length > 0) yield await inflight.shift()!;
  }
}

/** A gang: exactly `size` executors granted together, with ranks and a rendezvous. */
export class GangHandle<S = any> extends BaseHandle {
  readonly kind = "gang" as const;

  /** A view of this gang whose calls (`broadcast`, `callRank`) carry `opts`: a deadline and/or an abort signal. */
  withOptions(opts: CallOptions): GangHandle<S> {
    return new GangHandle<S>(this.client, this.infoValue, this.merged(opts));
  }

  /** Members by rank (rank follows sorted executor id). */
  get members(): GangMember[] {
    return this.infoValue.members ?? [];
  }

  /** Number of members. */
  get size(): number {
    return this.infoValue.warmup;
  }

  /** Calls `method` on every rank, with `argsPerRank[rank]` as its arguments; resolves in rank order. */
  broadcast<M extends MethodNames<S>>(method: M, argsPerRank: Array<MethodArgs<S, M>>): Promise<Array<MethodResult<S, M>>> {
    if (argsPerRank.length !== this.size) {
      return Promise.reject(new RangeError(`broadcast to gang '${this.name}' needs ${this.size} argument lists (one per rank); got ${argsPerRank.length}`));
    }
    return Promise.all(argsPerRank.map((args, rank) => this.client.call(this.infoValue.id, method, args, rank, this.callOptions))) as Promise<
      Array<MethodResult<S, M>>
    >;
  }

  /** Calls `method` on one rank. */
  callRank<M extends MethodNames<S>>(rank: number, method: M, ...args: MethodArgs<S, M>): Promise<MethodResult<S, M>> {
    return this.client.call(this.infoValue.id, method, args, rank, this.callOptions) as Promise<MethodResult<S, M>>;
  }
}
