/**
 * The executor host: the body of one executor process. Loads the user's
 * service class once, awaits `init(ctx)` (models, indexes, optimizer: the
 * warm state), then serves calls from the head until SIGTERM, when it awaits
 * `close()` and exits. A TypeScript service module (.ts, .mts, .cts) is
 * loaded through tsx (esbuild: types stripped, relative imports between .ts
 * files resolved, no build step); JavaScript is imported as it is. It
 * heartbeats to the head every EXECUTOR_HEARTBEAT_MS with the liveness of
 * the tensor engines it holds, and at once when one of them dies or hangs.
 */
import { Worker } from "node:worker_threads";
import type { ExecutorContext, ServiceInstance } from "../sdk/runtime/types.js";
import { DealerChannel } from "../sdk/wire/channel.js";
import { MESSAGE_LIMIT, decode, decodeHeader, encode, num, str } from "../sdk/wire/codec.js";
import { ServiceConfigError } from "../sdk/errors/index.js";
import { MessageTooLargeError, ProtocolError, toWireError, type WireError } from "../sdk/wire/errors.js";
import { PendingRequests } from "../sdk/wire/requests.js";
import { curveClientFromEnv } from "../sdk/wire/curve.js";
import { ObjectCache } from "../sdk/cache/object-cache.js";
import { executorCredential } from "./executor-credential.js";
import { engineLiveness, onEngineChange } from "../sdk/tensor/liveness.js";
import { importServiceModule } from "../sdk/runtime/import-module.js";
import { memoryReport } from "./resources.js";

/** What the agent passes in HEARTH_EXECUTOR_CONTEXT. */
export interface ExecutorLaunch extends Omit<ExecutorContext, "objects"> {
  module: string;
  export: string;
}

const RESERVED = new Set(["constructor", "init", "close"]);

/** How often the parent watchdog looks at the parent pid. */
export const PARENT_POLL_MS = 200;
/** How long an orphaned executor's SIGTERM (close()) gets before the watchdog sends SIGKILL. */
export const ORPHAN_GRACE_MS = 2_000;
/** How often an executor heartbeats to the head (engine liveness); a dead or hung engine is reported at once. */
export const EXECUTOR_HEARTBEAT_MS = 2_000;

// Runs in its own thread, so it notices a dead agent even while the main
// thread is stuck in synchronous user code (where the IPC 'disconnect' event
// could never be delivered).
const WATCHDOG_SOURCE = `
const { workerData, parentPort } = require("node:worker_threads");
const timer = setInterval(() => {
  if (process.ppid === workerData.parent) return;
  clearInterval(timer);
  parentPort.postMessage("orphaned");
  process.kill(process.pid, "SIGTERM");
  setTimeout(() => process.kill(process.pid, "SIGKILL"), workerData.graceMs);
}, workerData.pollMs);
`;

/**
 * Starts a thread that ends this process when its parent (the agent, pid
 * `parent`) is gone: it posts "orphaned" to the main thread (which tells the
 * head, if its event loop is free), sends SIGTERM (close() runs if the event
 * loop is free), then SIGKILL after ORPHAN_GRACE_MS. The thread does not keep
 * the process alive.
 */
export function watchParent(parent: number): Worker {
  const worker = new Worker(WATCHDOG_SOURCE, { eval: true, workerData: { parent, pollMs: PARENT_POLL_MS, graceMs: ORPHAN_GRACE_MS } });
  worker.unref();
  return worker;
}

/** Lists the callable methods of a service instance. */
export function serviceMethods(instance: object): string[] {
  const names = new Set<string>();
  for (let p = Object.getPrototypeOf(instance); p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const k of Object.getOwnPropertyNames(p)) {
      if (RESERVED.has(k) || k.startsWith("_")) continue;
      if (typeof (instance as Record<string, unknown>)[k] === "function") names.add(k);
    }
  }
  return [...names].sort();
}

function remoteError(err: unknown, launch: ExecutorLaunch, method?: string): WireError {
  // User code may throw anything; a non-Error is reported by its text.
  const e = err instanceof Error ? err : undefined;
  const name = e?.name ?? "Error";
  const message = e?.message ?? String(err);
  return {
    name: "RemoteError",
    message,
    remoteName: name,
    remoteStack: e?.stack ?? `${name}: ${message}`,
    service: launch.service,
    executorId: launch.executorId,
    method,
    cause: e?.cause === undefined ? undefined : toWireError(e.cause, 1),
  };
}

export { importServiceModule };

/** Runs one executor until it is told to stop. */
export async function runExecutor(headEndpoint: string, launch: ExecutorLaunch, agentCache?: string): Promise<void> {
  const { routingId, credential } = executorCredential(launch);
  const channel = new DealerChannel(routingId, { maxMessageSize: 64 * 1024 * 1024, curveClient: curveClientFromEnv(), auth: credential });
  channel.connect(headEndpoint);
  const headRequests = new PendingRequests(channel, `head at ${headEndpoint}`);
  // Served from the start: the handshake (and replies to init's object requests) must get through while the module loads.
  void channel.serve(async (frames) => onHeadMessage(frames));
  let objects: ObjectCache = new ObjectCache(headRequests);
  let cacheChannel: DealerChannel | undefined;
  if (agentCache) {
    cacheChannel = new DealerChannel(routingId, { maxMessageSize: 64 * 1024 * 1024, auth: credential });
    cacheChannel.connect(agentCache);
    const agentRequests = new PendingRequests(cacheChannel, `agent cache at ${agentCache}`);
    void cacheChannel.serve((frames) => void agentRequests.deliver(decodeHeader(frames[0]), frames));
    objects = new ObjectCache(agentRequests, headRequests, { local: true });
  }
  const ctx: ExecutorContext = { ...launch, objects };
  let instance: (ServiceInstance & Record<string, unknown>) | undefined;
  const methods = new Set<string>();
  let ready = false;
  let closing: Promise<void> | undefined;

  const shutdown = (code: number): Promise<void> =>
    (closing ??= (async () => {
      try {
        if (instance?.close) await instance.close();
      } catch (err) {
        console.error(`close() of ${launch.service} threw:`, err);
      }
      await channel.flush();
      channel.close();
      cacheChannel?.close();
      process.exit(code);
    })());
  process.on("SIGTERM", () => void shutdown(0));
  process.on("SIGINT", () => void shutdown(0));
  // The agent holds our IPC channel: if it dies, so do we (no orphan holding a GPU). Telling the
  // head first lets it confirm the agent's loss in seconds rather than after its agent timeout.
  const orphaned = (): void => {
    if (closing) return;
    channel.send([encode({ t: "orphaned" })]);
    void shutdown(0);
  };
  process.on("disconnect", orphaned);
  // After a head restart the agent asks us to say hello: the new head sends no call before it heard from us.
  process.on("message", (m: { t?: unknown } | null) => {
    if (m?.t === "announce") channel.send([encode({ t: "hello", pid: process.pid })]);
  });
  const agentPid = Number(process.env.HEARTH_AGENT_PID);
  watchParent(Number.isInteger(agentPid) && agentPid > 0 ? agentPid : process.ppid).on("message", orphaned);
  // Engine liveness: a gang rank whose engine died fails its gang from this, within moments.
  // The change is sent synchronously, before the calls waiting on that engine fail.
  const beat = (): void => channel.send([encode({ t: "hb", engines: engineLiveness(), memory: memoryReport() })]);
  setInterval(beat, EXECUTOR_HEARTBEAT_MS).unref();
  onEngineChange(beat);

  try {
    const mod = await importServiceModule(launch.module);
    const Cls = mod[launch.export];
    if (typeof Cls !== "function") {
      const found = Object.keys(mod).filter((k) => typeof mod[k] === "function");
      throw new ServiceConfigError(`module ${launch.module} has no exported class '${launch.export}' (exported functions/classes: ${found.join(", ") || "none"})`, { service: launch.service });
    }
    instance = new (Cls as new () => ServiceInstance & Record<string, unknown>)();
    const initDone = typeof instance.init === "function" ? instance.init(ctx) : undefined;
    await initDone;
  } catch (err) {
    channel.send([encode({ t: "init-failed", error: remoteError(err, launch) })]);
    // The head answers by asking our agent to stop us; exit anyway if it does not.
    setTimeout(() => void shutdown(1), 15_000).unref();
    return;
  }
  for (const m of serviceMethods(instance)) methods.add(m);
  ready = true;
  channel.send([encode({ t: "ready", pid: process.pid, methods: [...methods] })]);
  beat(); // the engines init started, known to the head from the start
  // The agent reports readiness when it re-registers with a restarted head (which never saw this `ready`).
  process.send?.({ t: "ready" });

  function onHeadMessage(frames: Buffer[]): void {
    const h = decodeHeader(frames[0]);
    if (h.t === "rep") return void headRequests.deliver(h, frames);
    if (h.t === "exit-now") return void shutdown(0);
    if (h.t !== "call" || !ready) return;
    const hid = num(h, "hid");
    const method = str(h, "method");
    // Calls run concurrently (the head limits how many); do not await here.
    void (async () => {
      try {
        if (!methods.has(method)) {
          throw new ServiceConfigError(`${launch.export} has no method '${method}' (methods: ${[...methods].join(", ") || "none"})`, { service: launch.service });
        }
        const args = decode(frames[1] ?? encode([]));
        if (!Array.isArray(args)) throw new ProtocolError("call arguments must be an array");
        const value = await (instance![method] as (...a: unknown[]) => unknown)(...args);
        const payload = encode(value);
        if (payload.byteLength > MESSAGE_LIMIT) {
          throw new MessageTooLargeError(payload.byteLength, MESSAGE_LIMIT, `the result of ${launch.service}.${method}`);
        }
        channel.send([encode({ t: "result", hid }), payload]);
      } catch (err) {
        channel.send([encode({ t: "failed", hid, error: remoteError(err, launch, method) })]);
      }
    })();
  }
}
