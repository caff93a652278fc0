/**
 * The head's status document: what `app.status()` and `hearth status` show.
 */
import { objectBuffers } from "../../sdk/cache/buffers.js";
import type { LogSinkStats } from "../log-sink.js";
import type { ObjectService } from "../object-service.js";
import type { AppRecord } from "./records.js";
import type { Scheduler } from "./scheduler.js";
import { serviceSummary } from "./service-lifecycle.js";
import { explainPending } from "./pending.js";

/** What the status document is built from (the head provides it; this file does not import head.ts). */
export interface StatusSource {
  readonly id: string;
  readonly endpoint: string;
  readonly startedAt: number;
  readonly stats: Record<string, number>;
  /** Log lines written and dropped (log-sink.ts). */
  readonly logSink: { readonly stats: LogSinkStats };
  readonly scheduler: Scheduler;
  readonly objects: ObjectService;
  /** Where large parts are spooled without a data dir (memory or disk). */
  readonly spool?: { kind: string; why: string };
  /** Drivers of an app heard from within the driver timeout. */
  liveDrivers(app: AppRecord, now: number): number;
  /** Keep-alive deadline of an app, or undefined while a driver is attached. */
  releaseAt(app: AppRecord): number | undefined;
}

function memoryOf(m: NodeJS.MemoryUsage): { rss: number; heapTotal: number; heapUsed: number; external: number; largestObjectBuffer: number } {
  return { rss: m.rss, heapTotal: m.heapTotal, heapUsed: m.heapUsed, external: m.external, largestObjectBuffer: objectBuffers.largest };
}

/** What a status request may ask for beyond the default document. */
export interface StatusOptions {
  /** List up to this many object keys per app (sorted; `keysLeftOut` counts the rest). Default 0: counts and bytes only. */
  keys?: number;
}

/** Builds the status of one app (or of every app when `appName` is undefined). */
export function buildStatus(head: StatusSource, appName: string | undefined, opts: StatusOptions = {}): Record<string, unknown> {
  const sched = head.scheduler;
  const now = Date.now();
  const apps = [...sched.apps.values()].filter((a) => appName === undefined || a.name === appName);
  return {
    head: { id: head.id, endpoint: head.endpoint, pid: process.pid, uptimeMs: now - head.startedAt, ...head.stats, calls: sched.router.stats, log: { ...head.logSink.stats }, memory: memoryOf(process.memoryUsage()) },
    objects: { ...head.objects.store.usage(), traffic: head.objects.traffic, spool: head.spool ? { medium: head.spool.kind, dir: head.objects.store.spoolDir ?? null, why: head.spool.why } : null },
    agents: [...sched.agents.values()].map((a) => ({
      id: a.id,
      host: a.host,
      pid: a.pid,
      total: { cpu: a.total.cpu, mem: a.total.mem, gpus: a.total.gpus },
      free: { cpu: a.free.cpu, mem: a.free.mem, gpus: a.free.gpus },
      executors: a.executors.size,
      cache: a.cache ?? null,
      memory: a.memory ?? null,
      lastSeenMsAgo: now - a.lastSeen,
      labels: a.labels,
      isolation: a.isolation ?? null,
    })),
    apps: apps.map((app) => ({
      name: app.name,
      drivers: head.liveDrivers(app, now),
      keepAliveMs: app.keepAliveMs,
      releaseAt: head.releaseAt(app) ?? null,
      objects: head.objects.store.summary(`${app.name}/`, opts.keys ?? 0),
      services: [...app.services.values()].map((s) => ({
        ...serviceSummary(s),
        queued: s.queue.length,
        blocked: s.blocked,
        /** Why it waits for placement (pending.ts): which service, placed of wanted, each agent's free resources; null when placed. */
        pending: explainPending(sched, s) ?? null,
        elastic: s.spec.elastic,
        concurrency: s.spec.concurrency,
        drivesApp: s.spec.drivesApp === true,
        inflight: [...s.executors.values()].reduce((n, e) => n + e.inflight.size, 0),
        error: s.error?.message ?? null,
        executors: [...s.executors.values()].map((e) => ({
          id: e.id,
          state: e.state,
          agent: e.agentId,
          pid: e.pid ?? null,
          rank: e.rank ?? null,
          gpus: e.gpus,
          inflight: e.inflight.size,
          callsDone: e.callsDone,
          engines: e.engines ?? [],
          memory: e.memory ?? null,
          idleMs: e.state === "idle" ? now - e.idleSince : 0,
        })),
        dead: s.dead.map((d) => ({ id: d.id, state: "dead", agent: d.agentId, rank: d.rank ?? null, code: d.code, signal: d.signal, agoMs: now - d.diedAt, detail: d.detail })),
      })),
    })),
  };
}
