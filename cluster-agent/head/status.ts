/**
 * The head's status document: what `app.status()` and `hearth status` show.
 */
import { formatResources } from "../../sdk/runtime/resreq.js";
import type { Head } from "./head.js";

/** Builds the status of one app (or of every app when `appName` is undefined). */
export function buildStatus(head: Head, appName: string | undefined): Record<string, unknown> {
  const sched = head.scheduler;
  const now = Date.now();
  const apps = [...sched.apps.values()].filter((a) => appName === undefined || a.name === appName);
  return {
    head: { id: head.id, endpoint: head.endpoint, pid: process.pid, uptimeMs: now - head.startedAt, ...head.stats, calls: sched.router.stats },
    objects: { ...head.objects.store.usage(), traffic: head.objects.traffic },
    agents: [...sched.agents.values()].map((a) => ({
      id: a.id,
      host: a.host,
      pid: a.pid,
      total: { cpu: a.total.cpu, mem: a.total.mem, gpus: a.total.gpus },
      free: { cpu: a.free.cpu, mem: a.free.mem, gpus: a.free.gpus },
      executors: a.executors.size,
      lastSeenMsAgo: now - a.lastSeen,
      labels: a.labels,
    })),
    apps: apps.map((app) => ({
      name: app.name,
      drivers: head.liveDrivers(app, now),
      keepAliveMs: app.keepAliveMs,
      releaseAt: head.releaseAt(app) ?? null,
      services: [...app.services.values()].map((s) => ({
        id: s.id,
        name: s.spec.name,
        kind: s.kind,
        state: s.state,
        resreq: formatResources(s.spec.resources),
        warmup: s.spec.warmup,
        max: Number.isFinite(s.spec.max) ? s.spec.max : null,
        queued: s.queue.length,
        blocked: s.blocked,
        elastic: s.spec.elastic,
        concurrency: s.spec.concurrency,
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
          idleMs: e.state === "idle" ? now - e.idleSince : 0,
        })),
      })),
    })),
  };
}
