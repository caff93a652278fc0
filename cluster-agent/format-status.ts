/**
 * Plain-text rendering of a head status document for `hearth status` and the demo.
 */
import { formatBytes } from "../sdk/format.js";

/** Renders the status document as aligned text. */
export function formatStatus(status: any): string {
  const lines: string[] = [];
  const dropped = status.head.log?.dropped ? `; ${status.head.log.dropped} log line(s) dropped: ${status.head.log.lastError}` : "";
  lines.push(`head ${status.head.endpoint} (pid ${status.head.pid}, up ${Math.round(status.head.uptimeMs / 1000)} s${dropped})`);
  const o = status.objects;
  if (o) lines.push(`objects: ${o.objects} (${formatBytes(o.bytes ?? 0)}), ${formatBytes(o.memUsed)} in memory of ${formatBytes(o.memLimit)}${o.spool ? `; large parts spooled on ${o.spool.medium} (${o.spool.dir})` : o.persistent ? "; in the data dir" : ""}`);
  lines.push(`agents: ${status.agents.length}`);
  for (const a of status.agents) {
    lines.push(
      `  ${a.id} @ ${a.host}: cpu ${a.free.cpu}/${a.total.cpu} free, mem ${formatBytes(a.free.mem)}/${formatBytes(a.total.mem)}, ` +
        `gpus [${a.free.gpus.join(",")}] of [${a.total.gpus.join(",")}] free, ${a.executors} executor(s)` +
        (a.cache ? `, node cache ${a.cache.objects} object(s) (${formatBytes(a.cache.bytes)})${a.cache.medium ? ` on ${a.cache.medium} (${a.cache.dir})` : ""}` : ""),
    );
    if (a.isolation?.mode === "per-app-uid") lines.push(`    executors: each app as its own user (uids ${a.isolation.uids})`);
    else if (a.isolation?.mode === "shared-user") lines.push(`    executors: as the agent's own user (uid ${a.isolation.uid}: ${a.isolation.why}); any service can read HEARTH_HOME and the cluster secret`);
  }
  const apps = status.apps.filter((app: any) => !String(app.name).startsWith("_hearth-"));
  lines.push(`apps: ${apps.length}`);
  for (const app of apps) {
    const release = app.releaseAt ? `, released in ${Math.max(0, Math.round((app.releaseAt - Date.now()) / 1000))} s unless a driver returns` : "";
    const objects = app.objects ? `, ${app.objects.objects} object(s) (${formatBytes(app.objects.bytes)})` : "";
    lines.push(`  ${app.name}: ${app.drivers} driver(s), keep-alive ${Math.round(app.keepAliveMs / 1000)} s${objects}${release}`);
    for (const s of app.services) {
      lines.push(`    ${s.name} [${s.kind}, ${s.state}] ${s.resreq} warmup ${s.warmup}${s.max !== null ? ` max ${s.max}` : ""}; queued ${s.queued}, in flight ${s.inflight}${s.error ? `; error: ${s.error}` : ""}`);
      for (const e of s.executors) {
        const rank = e.rank !== null ? ` rank ${e.rank}` : "";
        const gpus = e.gpus.length ? ` gpus [${e.gpus.join(",")}]` : "";
        const engines = (e.engines ?? []).map((x: any) => `engine ${x.pid ?? "?"} ${x.state}`).join(", ");
        lines.push(`      ${e.id} ${e.state.padEnd(8)} on ${e.agent}${rank}${gpus}, pid ${e.pid ?? "-"}, ${e.callsDone} call(s) done${engines ? `; ${engines}` : ""}`);
      }
      for (const d of s.dead ?? []) {
        lines.push(`      ${d.id} ${"dead".padEnd(8)} on ${d.agent}${d.rank !== null ? ` rank ${d.rank}` : ""}, ${d.signal ?? `exit ${d.code}`} ${Math.round(d.agoMs / 1000)} s ago`);
      }
    }
  }
  const jobs = status.slurm?.jobs ?? [];
  if (status.slurm) lines.push(`slurm jobs: ${jobs.length}${status.slurm.lastError ? ` (last error: ${status.slurm.lastError})` : ""}`);
  for (const j of jobs) lines.push(`  ${formatSlurmJob(j)}`);
  return lines.join("\n");
}

/** One Slurm job: id, state, app/service, nodes (or why it waits), how long it waited in the queue. */
export function formatSlurmJob(j: any): string {
  const what = [j.app, j.service].filter((x: unknown) => typeof x === "string" && x !== "").join("/") || j.serviceId || "?";
  const tasks = j.tasks > 0 ? `, ${j.tasks} task(s)` : "";
  const where = j.state === "PENDING" ? `waiting (${j.where || "?"})` : `on ${j.where || "?"}`;
  const waited = j.waitedMs !== null && j.waitedMs !== undefined ? `, waited ${(j.waitedMs / 1000).toFixed(1)} s${j.state === "PENDING" ? " so far" : ""}` : "";
  const up = j.startLatencyMs !== null && j.startLatencyMs !== undefined ? `, agent up ${(j.startLatencyMs / 1000).toFixed(1)} s after sbatch` : "";
  return `job ${j.id} ${String(j.state).padEnd(9)} ${what}${tasks} ${where}${waited}${up}`;
}
