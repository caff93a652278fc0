/**
 * The runtime's status document (`app.status()`) as a notebook output: one
 * HTML table of executors per service (state, agent, rank, GPUs, calls), a
 * summary of agents and queues, the app's Slurm jobs when its engine is
 * Slurm (id, state, nodes, queue wait), and the same as text.
 */
import type { AppStatus } from "../runtime/app.js";
import { JUPYTER_DISPLAY, type MimeBundle } from "./display.js";
import { escapeHtml, htmlTable, textTable } from "./text.js";

type ServiceStatus = AppStatus["apps"][number]["services"][number];

const EXECUTOR_COLUMNS = ["service", "kind", "executor", "state", "agent", "rank", "gpus", "in flight", "calls done", "idle s"];
const JOB_COLUMNS = ["slurm job", "service", "tasks", "state", "nodes (or why pending)", "waited s", "agent up s"];

/** A Slurm job as the Slurm engine adds it to the status (read structurally: the notebook knows no engine). */
interface JobRow {
  id: string;
  service: string;
  tasks: number;
  state: string;
  where: string;
  waitedMs: number | null;
  startLatencyMs: number | null;
}

const seconds = (ms: number | null | undefined): string => (ms === null || ms === undefined ? "" : (ms / 1000).toFixed(1));

/** A rendering of one status document. */
export class StatusView {
  constructor(readonly status: AppStatus) {}

  /** The apps shown: the status of internal `_hearth-*` apps is left out. */
  private apps(): AppStatus["apps"] {
    return this.status.apps.filter((a) => !a.name.startsWith("_hearth-"));
  }

  /** One row per executor (a service without executors gets one row of its own). */
  executorRows(): unknown[][] {
    const rows: unknown[][] = [];
    for (const app of this.apps()) {
      for (const s of app.services) {
        if (s.executors.length === 0) rows.push([s.name, s.kind, "", s.state, "", "", "", 0, 0, ""]);
        for (const e of s.executors) {
          rows.push([s.name, s.kind, e.id, e.state, e.agent, e.rank ?? "", e.gpus.join(","), e.inflight, e.callsDone, Math.round(e.idleMs / 1000)]);
        }
      }
    }
    return rows;
  }

  /** The Slurm jobs of the app (ids, states, nodes, queue wait), when its engine is Slurm. */
  jobRows(): unknown[][] {
    const jobs = (this.status as { slurm?: { jobs?: JobRow[] } }).slurm?.jobs ?? [];
    return jobs.map((j) => [j.id, j.service, j.tasks || "", j.state, j.where, seconds(j.waitedMs), seconds(j.startLatencyMs)]);
  }

  private serviceLine(s: ServiceStatus): string {
    const max = s.max !== null ? `, max ${s.max}` : "";
    return `${s.name} [${s.kind}, ${s.state}] ${s.resreq}: ${s.executors.length} executor(s) (warmup ${s.warmup}${max}), queued ${s.queued}, in flight ${s.inflight}${s.error ? `, error: ${s.error}` : ""}`;
  }

  private headerLines(): string[] {
    const lines = [`head ${this.status.head.endpoint}, up ${Math.round(this.status.head.uptimeMs / 1000)} s`];
    for (const a of this.status.agents) {
      const gpus = a.total.gpus.length ? `, gpus ${a.free.gpus.length}/${a.total.gpus.length} free` : "";
      lines.push(`agent ${a.id} @ ${a.host}: cpu ${a.free.cpu}/${a.total.cpu} free${gpus}, ${a.executors} executor(s)`);
    }
    for (const app of this.apps()) {
      const release = app.releaseAt ? `, released in ${Math.max(0, Math.round((app.releaseAt - Date.now()) / 1000))} s unless a driver returns` : "";
      lines.push(`app ${app.name}: ${app.drivers} driver(s), keep-alive ${Math.round(app.keepAliveMs / 1000)} s${release}`);
      for (const s of app.services) lines.push(`  ${this.serviceLine(s)}`);
    }
    return lines;
  }

  /** The status as text. */
  text(): string {
    const jobs = this.jobRows();
    return [...this.headerLines(), "", textTable(EXECUTOR_COLUMNS, this.executorRows()), ...(jobs.length > 0 ? ["", textTable(JOB_COLUMNS, jobs)] : [])].join("\n");
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const jobs = this.jobRows();
    const summary = this.headerLines().map((l) => `<div>${escapeHtml(l).replace(/^ +/, (sp) => "&nbsp;".repeat(sp.length))}</div>`).join("");
    const html = `<div class="hearth-status" style="font-family: monospace">${summary}${htmlTable(EXECUTOR_COLUMNS, this.executorRows())}${jobs.length > 0 ? htmlTable(JOB_COLUMNS, jobs) : ""}</div>`;
    return { "text/plain": this.text(), "text/html": html };
  }
}

/** A displayable view of `app.status()`. */
export function statusView(status: AppStatus): StatusView {
  return new StatusView(status);
}
