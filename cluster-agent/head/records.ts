/**
 * The head's in-memory records: agents, apps, services, executors and calls.
 * Plain data; the behaviour lives in the scheduler and the peer protocols.
 */
import type { Resources } from "../../sdk/runtime/resreq.js";
import type { WireError } from "../../sdk/wire/errors.js";
import type { Capacity } from "./placement.js";

/** What an agent's heartbeat says of its node cache. */
export interface NodeCacheReport {
  objects: number;
  bytes: number;
  /** Bytes of its files (copies, and folders' bytes the copies no longer hold) and their limit. */
  fileBytes?: number;
  fileLimit?: number;
  /** Its folder, and whether that is memory-backed or disk. */
  dir?: string;
  medium?: string;
}

/** An agent process registered with the head (one per node). */
export interface AgentRecord {
  id: string;
  routingId: Buffer;
  host: string;
  pid: number;
  total: Capacity;
  free: Capacity;
  lastSeen: number;
  executors: Set<string>;
  /** Set while a `hearth agent` was started by the embedded engine or Slurm for a job. */
  labels: Record<string, string>;
  /**
   * Who its executors run as, as it registered (executor-users.ts): `per-app-uid` (each app its own
   * user) or `shared-user` (the agent's own: any service can read what the agent can). Undefined from an
   * agent that did not say.
   */
  isolation?: { mode: string; [k: string]: unknown };
  /** Since when one of its executors reported it gone (`orphaned`): it is lost unless heard from soon (agent-protocol.ts). */
  suspectSince?: number;
  /** Its node cache's objects and bytes, as its last heartbeat reported them. */
  cache?: NodeCacheReport;
  /** Where its node cache listens for other nodes (pass-through copies), as it registered; undefined from an agent that did not say. */
  cacheEndpoint?: string;
  /** Its process's memory, as its last heartbeat reported it. */
  memory?: MemoryReport;
}

/** What a driver declared for a service. */
export interface ServiceSpec {
  name: string;
  module: string;
  /** A shipped project: the module path is relative to its root. */
  project?: { hash: string; key: string };
  exportName: string;
  resreq: string;
  resources: Resources;
  warmup: number;
  autoscale: boolean;
  max: number;
  idleTimeoutMs: number;
  concurrency: number;
  /** Default deadline of a call (ms from when the head accepts it); null: calls have no deadline unless the driver gives one. */
  callTimeoutMs: number | null;
  /** An executor not ready this long after the head created it (module load, project setup, `init`) is killed and the service fails. */
  initTimeoutMs: number;
  /** Calls waiting for an executor at most; more are refused with QueueFullError (backpressure). */
  maxQueued: number;
  /**
   * Agents are brought for this service by an engine (Slurm jobs): declaring
   * it does not need a registered agent, and it runs only on agents labelled
   * `hearth.service=<its id>`.
   */
  elastic: boolean;
  /** Its executors get the app's driver token from their agent (they drive their siblings: a run's loop). */
  drivesApp?: boolean;
}

export type ServiceState = "pending" | "starting" | "ready" | "failed" | "stopped";
export type ExecutorState = "starting" | "idle" | "busy" | "stopping" | "dead";

/** A waiter for a service to become ready (a deferred reply to a driver request). */
export interface ReadyWaiter {
  routingId: Buffer;
  rid: number;
  /** When the waiter gives up with a TimeoutError (epoch ms); undefined: never. */
  deadline?: number;
  timeoutMs?: number;
}

/** A service instance of an app: a pool or a gang. */
export interface ServiceRecord {
  id: string;
  app: string;
  spec: ServiceSpec;
  kind: "pool" | "gang";
  state: ServiceState;
  executors: Map<string, ExecutorRecord>;
  /** Calls waiting for a free executor, oldest first (gang calls carry a rank). */
  queue: CallRecord[];
  error?: WireError;
  waiters: ReadyWaiter[];
  /** Executors that died before becoming ready, in a row. */
  startFailures: number;
  /** Since when this (non-elastic) service has had queued calls, no live executor and no agent that could ever hold one. */
  orphanedSince?: number;
  /** Executors that died unexpectedly, most recent last (kept for status, at most 10). */
  dead: Array<{ id: string; agentId: string; rank?: number; code: number | null; signal: string | null; diedAt: number; detail: string }>;
  /** True when the last scheduling pass could not place an executor this service wanted. */
  blocked: boolean;
  /** Declaration order across the head, for FIFO fairness between gangs. */
  seq: number;
  /** Gang rendezvous (rank 0's host and a reserved port). */
  rendezvous?: { host: string; port: number };
  createdAt: number;
  /**
   * Restored from the data dir after a head restart and still waiting for its
   * agents to report their live executors (recovery.ts): its adopted
   * executors serve calls, but nothing new is started for it yet.
   */
  recovering?: boolean;
}

/** One executor process (one service instance). */
export interface ExecutorRecord {
  id: string;
  serviceId: string;
  agentId: string;
  gpus: string[];
  state: ExecutorState;
  rank?: number;
  pid?: number;
  inflight: Map<number, CallRecord>;
  startedAt: number;
  idleSince: number;
  callsDone: number;
  /**
   * Adopted after a head restart and not heard from on its own connection yet:
   * calls would be dropped by the ROUTER until it has reconnected, so it takes
   * none until its `hello` (or any message) arrives.
   */
  unconfirmed?: boolean;
  exit?: { code: number | null; signal: string | null };
  /** The tensor engines its last heartbeat reported (executor-protocol.ts acts on one that stopped running). */
  engines?: EngineReport[];
  /** Its process's memory (bytes: rss, heapTotal, heapUsed, external), as its last heartbeat reported it. */
  memory?: MemoryReport;
  /** When its last heartbeat arrived. */
  heardAt?: number;
}

/** A Node process's memory as its heartbeat reports it (process.memoryUsage(), bytes): what a soak tells apart (V8 heap or native). */
export interface MemoryReport {
  rss: number;
  heapTotal: number;
  heapUsed: number;
  external: number;
  /** The largest buffer the process made for an object (0 when it never made one; absent from older processes). */
  largestObjectBuffer?: number;
}

/** The memory figures of a heartbeat, or undefined when absent or malformed. */
export function parseMemoryReport(raw: unknown): MemoryReport | undefined {
  const m = raw as Record<string, unknown> | null | undefined;
  if (typeof m !== "object" || m === null) return undefined;
  const keys = ["rss", "heapTotal", "heapUsed", "external"] as const;
  if (!keys.every((k) => typeof m[k] === "number" && Number.isFinite(m[k]))) return undefined;
  const largest = typeof m.largestObjectBuffer === "number" && Number.isFinite(m.largestObjectBuffer) ? { largestObjectBuffer: m.largestObjectBuffer } : {};
  return { rss: m.rss as number, heapTotal: m.heapTotal as number, heapUsed: m.heapUsed as number, external: m.external as number, ...largest };
}

/** One tensor engine as an executor's heartbeat reports it (sdk/tensor/liveness.ts). */
export interface EngineReport {
  pid: number | null;
  state: "running" | "hung" | "wedged" | "exited";
  silentMs: number;
  op: string | null;
  detail: string | null;
}

/** A call as the head tracks it between driver and executor. */
export interface CallRecord {
  hid: number;
  driver: Buffer;
  cid: number;
  serviceId: string;
  method: string;
  args: Buffer;
  rank?: number;
  /** A pool call pinned to this executor: never moved to another, failed when it dies. */
  target?: string;
  attempts: number;
  executorId?: string;
  /** The deadline in ms from acceptance, and its timer (cleared when the call is answered). */
  timeoutMs?: number;
  timer?: NodeJS.Timeout;
  /** The driver stopped waiting (abort): run to completion or deadline, but answer nothing. */
  cancelled?: boolean;
}

/** An app: a named group of services owned by drivers that come and go. */
export interface AppRecord {
  name: string;
  keepAliveMs: number;
  /** Connected drivers by routing id (hex) → last time heard from. */
  drivers: Map<string, number>;
  /** When the last driver went away; the app is released keepAliveMs later. */
  goneSince?: number;
  services: Map<string, ServiceRecord>;
  createdAt: number;
}

/** A fresh service record with empty queues and no executors (declared now, or restored from a data dir). */
export function newServiceRecord(fields: Pick<ServiceRecord, "id" | "app" | "spec" | "kind" | "state" | "seq" | "createdAt"> & Partial<ServiceRecord>): ServiceRecord {
  return { executors: new Map(), queue: [], waiters: [], startFailures: 0, dead: [], blocked: false, ...fields };
}
