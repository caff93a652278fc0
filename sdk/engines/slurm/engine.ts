/**
 * The Slurm engine: runs in the driver next to its App and turns the head's
 * demand into Slurm jobs. Every half second it reads the app's status and
 * its jobs (`squeue --name hearth.<app>`), then:
 *
 * - a pool gets one single-task job per executor it wants: `warmup` at
 *   least, more while calls queue beyond the free slots (up to `max`); a job
 *   whose agent has been empty for `emptyGraceMs` (the head stopped its idle
 *   executor after the pool's idle timeout) is cancelled, never below warmup;
 * - a pending gang gets ONE job of `warmup` tasks, so Slurm grants every
 *   member or none; when the gang fails (a member lost) its job is cancelled;
 * - jobs of services that are gone are cancelled; `close()` cancels them all.
 *
 * Agents started by a job carry `hearth.service=<service id>`, so the head
 * places only that service on them (and nothing else), and `hearth.job`.
 */
import path from "node:path";
import { mkdirSync } from "node:fs";
import type { HeadClient } from "../../runtime/head-client.js";
import { parseResreq } from "../../runtime/resreq.js";
import { nodeFlags, tunedEnv } from "../../runtime/process-tuning.js";
import { buildAgentJob, queueWaitMs, sbatch, scancel, squeue, type QueuedJob } from "./commands.js";
import { HEARTH_CLI } from "./head.js";
import { CURVE_KEYS_ENV } from "../../wire/curve.js";
import { SECRET_FILE_ENV } from "../../wire/auth.js";
import { TimeoutError } from "../../errors/index.js";

/** Options of the Slurm engine (also accepted by `connect({ engine: "slurm", ... })`). */
export interface SlurmEngineOptions {
  /** sbatch --partition. */
  partition?: string;
  /** sbatch --account. */
  account?: string;
  /** More sbatch options, as they are (e.g. ["--time=04:00:00"]). */
  extraArgs?: string[];
  /** How a task starts the hearth CLI. Default [this node binary, this project's dist/cluster-agent/cli.js] (a shared filesystem). */
  agentCommand?: string[];
  /** Memory per executor when its resreq names none. Default 512 MiB. */
  defaultMem?: number;
  /** How often demand is checked. Default 500 ms. */
  pollMs?: number;
  /** An agent that hosts nothing for this long is cancelled (pools, above warmup). Default 1 s. */
  emptyGraceMs?: number;
  /**
   * An agent exits (ending its job) after hosting nothing for this long, even
   * with no driver watching: once the app's keep-alive released its executors,
   * its jobs end. Default 5 min.
   */
  agentIdleExitMs?: number;
  /** Environment of the Slurm commands (and so of the jobs). Default process.env. */
  env?: NodeJS.ProcessEnv;
  /** The head's CURVE key file, as the compute nodes see it (set by connect()); agents get it in HEARTH_CURVE_KEYS. */
  curveKeys?: string | null;
}

/** One job the engine started (or adopted on reattach). */
export interface SlurmJobInfo {
  id: string;
  serviceId: string;
  service: string;
  tasks: number;
  /** Slurm's state: PENDING, RUNNING, ... */
  state: string;
  /** Node list when running, the reason when pending. */
  where: string;
  submittedAt: number;
  /** Milliseconds from sbatch to the first of its agents registering with the head. */
  startLatencyMs: number | null;
  /** Milliseconds the job waited in Slurm's queue (submit to start, as Slurm records them; still growing while pending). */
  waitedMs: number | null;
  /** Agent ids the job started that the head knows. */
  agents: string[];
}

interface Job extends SlurmJobInfo {
  cancelled: boolean;
  emptySince?: number;
}

/** What the engine reads from the head's status document. */
interface StatusService {
  id: string;
  name: string;
  kind: "pool" | "gang";
  state: string;
  resreq: string;
  warmup: number;
  max: number | null;
  queued: number;
  elastic?: boolean;
  concurrency?: number;
  /** Its executors drive the app (a run's loop): they run as the user who submits the jobs, as a driver would. */
  drivesApp?: boolean;
  executors: Array<{ state: string; inflight: number; agent: string }>;
}
/** An agent as the status document shows it. */
export interface StatusAgent {
  id: string;
  executors: number;
  labels?: Record<string, string>;
}

/**
 * The Slurm jobs of app `app` as Slurm sees them now, from any process (no
 * engine needed: `hearth status`, or after the driver is gone): ids, states,
 * nodes, how long each waited. `services` names the app's services by id.
 */
export async function listAppJobs(app: string, services: Array<{ id: string; name: string }>, env: NodeJS.ProcessEnv = process.env): Promise<SlurmJobInfo[]> {
  const jobs = await squeue(SlurmEngine.jobName(app), env);
  return jobs.map((q) => {
    const serviceId = /^hearth:[^:]+:(.+)$/.exec(q.comment)?.[1] ?? "";
    return {
      id: q.id,
      serviceId,
      service: services.find((s) => s.id === serviceId)?.name ?? "",
      tasks: 0,
      state: q.state,
      where: q.where,
      submittedAt: q.submittedAt ?? 0,
      startLatencyMs: null,
      waitedMs: queueWaitMs(q),
      agents: [],
    };
  });
}

function isLoopback(endpoint: string): boolean {
  return /^tcp:\/\/(127\.|localhost[:]|\[::1\])/.test(endpoint);
}

/** Drives Slurm jobs for one app. Create with `new SlurmEngine()`, then `start(client, app)`. */
export class SlurmEngine {
  private readonly jobs = new Map<string, Job>();
  private readonly env: NodeJS.ProcessEnv;
  private client?: HeadClient;
  private app = "";
  private headId = "";
  private timer?: NodeJS.Timeout;
  private ticking?: Promise<void>;
  private stopped = false;
  /** The last error the loop hit (shown in status), if any. */
  lastError: string | null = null;

  constructor(
    private readonly opts: SlurmEngineOptions,
    /** HEARTH_HOME: job scripts' output goes to <home>/slurm/. */
    private readonly home: string,
  ) {
    this.env = opts.env ?? process.env;
  }

  /** Job name of an app's jobs. */
  static jobName(app: string): string {
    return `hearth.${app}`;
  }

  /** Starts watching the app's demand; adopts the app's jobs still in the queue (a reattach). */
  async start(client: HeadClient, app: string, headId: string): Promise<void> {
    this.client = client;
    this.app = app;
    this.headId = headId;
    mkdirSync(path.join(this.home, "slurm"), { recursive: true, mode: 0o700 });
    for (const q of await squeue(SlurmEngine.jobName(app), this.env)) {
      const m = /^hearth:([^:]+):(.+)$/.exec(q.comment);
      if (!m || m[1] !== headId) continue;
      this.jobs.set(q.id, { id: q.id, serviceId: m[2]!, service: "", tasks: 0, state: q.state, where: q.where, submittedAt: q.submittedAt ?? Date.now(), startLatencyMs: null, waitedMs: queueWaitMs(q), agents: [], cancelled: false });
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.ticking = this.tick()
        .catch((err: unknown) => {
          this.lastError = (err as Error).message;
        })
        .finally(() => this.schedule());
    }, this.opts.pollMs ?? 500);
  }

  /** The jobs this engine holds, for `app.status()`; `agents` (from the same status) refreshes which agents each job started. */
  describe(agents?: StatusAgent[]): { jobs: SlurmJobInfo[]; lastError: string | null } {
    if (agents) for (const job of this.jobs.values()) this.noteAgents(job, agents);
    const jobs = [...this.jobs.values()].filter((j) => !j.cancelled).map(({ cancelled: _c, emptySince: _e, ...info }) => ({ ...info, agents: [...info.agents] }));
    return { jobs, lastError: this.lastError };
  }

  /** One pass: refresh job states from squeue, then reconcile every elastic service of the app. */
  async tick(): Promise<void> {
    if (!this.client || this.stopped) return;
    const status = await this.client.control("status", { app: this.app });
    const queued = new Map<string, QueuedJob>((await squeue(SlurmEngine.jobName(this.app), this.env)).map((q) => [q.id, q]));
    const agents = (status.agents ?? []) as StatusAgent[];
    for (const job of [...this.jobs.values()]) {
      const q = queued.get(job.id);
      if (!q && Date.now() - job.submittedAt > 2000) {
        this.jobs.delete(job.id); // ended (or cancelled) and gone from the queue
        continue;
      }
      if (q) {
        job.state = q.state;
        job.where = q.where;
        job.waitedMs = queueWaitMs(q);
      }
      this.noteAgents(job, agents);
    }
    const services = ((status.apps?.[0]?.services ?? []) as StatusService[]).filter((s) => s.elastic === true);
    // Jobs adopted from an earlier driver learn their service's name here.
    for (const job of this.jobs.values()) job.service ||= services.find((s) => s.id === job.serviceId)?.name ?? "";
    const live = await this.cancelGone(services);
    for (const s of services) {
      if (!live.has(s.id)) continue;
      if (s.kind === "gang") await this.reconcileGang(s);
      else await this.reconcilePool(s, agents);
    }
  }

  private noteAgents(job: Job, agents: StatusAgent[]): void {
    job.agents = agents.filter((a) => a.labels?.["hearth.job"] === job.id).map((a) => a.id);
    if (job.agents.length > 0 && job.startLatencyMs === null) job.startLatencyMs = Date.now() - job.submittedAt;
  }

  private jobsOf(serviceId: string): Job[] {
    return [...this.jobs.values()].filter((j) => j.serviceId === serviceId && !j.cancelled);
  }

  private async reconcileGang(s: StatusService): Promise<void> {
    if (s.state === "pending" && this.jobsOf(s.id).length === 0) await this.submit(s, s.warmup);
  }

  private async reconcilePool(s: StatusService, agents: StatusAgent[]): Promise<void> {
    const c = s.concurrency ?? 1;
    const jobs = this.jobsOf(s.id);
    const byId = new Map(agents.map((a) => [a.id, a]));
    const liveExecutors = s.executors.filter((e) => e.state !== "stopping" && e.state !== "dead");
    let free = 0;
    for (const e of liveExecutors) free += e.state === "starting" ? c : Math.max(0, c - e.inflight);
    const now = Date.now();
    const empty: Job[] = [];
    for (const j of jobs) {
      const hosted = j.agents.reduce((n, id) => n + (byId.get(id)?.executors ?? 0), 0);
      if (hosted > 0) {
        j.emptySince = undefined;
        continue;
      }
      free += c; // a job on its way (or an agent about to get an executor) is capacity
      if (j.agents.length > 0) empty.push(j);
      j.emptySince ??= now;
    }
    const deficit = s.queued - free;
    let want = jobs.length + (deficit > 0 ? Math.ceil(deficit / c) : 0);
    want = Math.max(want, s.warmup);
    if (s.max !== null) want = Math.min(want, s.max);
    for (let n = jobs.length; n < want; n++) await this.submit(s, 1);
    if (s.queued > 0 || deficit > 0) return;
    // Shrink: the head stops idle executors beyond warmup after the idle timeout; their jobs end here.
    let excess = jobs.length - Math.max(s.warmup, liveExecutors.length);
    const grace = this.opts.emptyGraceMs ?? 1000;
    const idle = empty.filter((j) => now - j.emptySince! >= grace);
    const pending = jobs.filter((j) => j.agents.length === 0 && j.state === "PENDING");
    const victims: Job[] = [];
    for (const j of [...pending, ...idle]) if (excess-- > 0) victims.push(j);
    if (victims.length > 0) await this.cancel(victims);
  }

  private async submit(s: StatusService, tasks: number): Promise<void> {
    if (!this.client) return;
    const resources = parseResreq(s.resreq);
    const { args, script } = buildAgentJob({
      name: SlurmEngine.jobName(this.app),
      comment: `hearth:${this.headId}:${s.id}`,
      tasks,
      resources,
      defaultMem: this.opts.defaultMem ?? 512 * 1024 * 1024,
      agentCommand: this.opts.agentCommand ?? [process.execPath, ...nodeFlags(), HEARTH_CLI],
      agentArgs: [
        "--head", this.client.endpoint,
        "--label", `hearth.service=${s.id}`,
        "--label", `hearth.app=${this.app}`,
        "--exit-when-idle", `${this.opts.agentIdleExitMs ?? 300_000}ms`,
        // Peers (a gang's rendezvous, gloo) reach the agent at its address on the route to the head: a node's
        // hostname may resolve to loopback there. A loopback head means every node is this machine.
        ...(isLoopback(this.client.endpoint) ? [] : ["--host", "route"]),
        // A service that drives its app (a run's loop on the cluster) is the user's own driver placed in a job: it
        // submits the run's jobs with the user's HEARTH_HOME, so an agent run as root does not give it a uid of the app.
        ...(s.drivesApp ? ["--executor-uids", "none"] : []),
      ],
      output: path.join(this.home, "slurm", "%j.out"),
      partition: this.opts.partition,
      account: this.opts.account,
      extraArgs: this.opts.extraArgs,
      // The cluster secret ships with the job (by path: HEARTH_HOME is on the shared filesystem); the agent reads it and keeps it from its executors.
      env: { [SECRET_FILE_ENV]: path.join(this.home, "secret"), ...tunedEnv(), ...(this.opts.curveKeys ? { [CURVE_KEYS_ENV]: this.opts.curveKeys } : {}) },
    });
    const submittedAt = Date.now();
    const id = await sbatch(args, script, this.env);
    this.jobs.set(id, { id, serviceId: s.id, service: s.name, tasks, state: "PENDING", where: "", submittedAt, startLatencyMs: null, waitedMs: null, agents: [], cancelled: false });
  }

  private async cancel(jobs: Job[]): Promise<void> {
    for (const j of jobs) j.cancelled = true;
    await scancel(jobs.map((j) => j.id), this.env);
  }

  /** Cancels the jobs of services that are gone, stopped or failed; returns the ids of the live ones. */
  private async cancelGone(services: StatusService[]): Promise<Set<string>> {
    const live = new Set(services.filter((s) => s.state !== "failed" && s.state !== "stopped").map((s) => s.id));
    const gone = [...this.jobs.values()].filter((j) => !j.cancelled && !live.has(j.serviceId));
    if (gone.length > 0) await this.cancel(gone);
    return live;
  }

  /**
   * Stops watching; the jobs of the app's live services keep running (a
   * disconnect: the app stays warm). Those of services stopped since the
   * last pass (a run's loop that released its rollouts and trainers, then
   * left) are cancelled now rather than when their agents exit idle.
   */
  async detach(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.ticking;
    if (!this.client) return;
    try {
      const status = await this.client.control("status", { app: this.app });
      await this.cancelGone(((status.apps?.[0]?.services ?? []) as StatusService[]).filter((s) => s.elastic === true));
    } catch {
      // The head may be gone (a driver leaving after a crash): its jobs end when their agents exit idle.
    }
  }

  /** Stops watching and cancels every job of the app, waiting until Slurm has ended them. Idempotent. */
  async close(timeoutMs = 30_000): Promise<void> {
    await this.detach();
    const name = SlurmEngine.jobName(this.app);
    const mine = (q: QueuedJob): boolean => this.jobs.has(q.id) || q.comment.startsWith(`hearth:${this.headId}:`);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const left = (await squeue(name, this.env)).filter(mine);
      if (left.length === 0) break;
      if (Date.now() > deadline) throw new TimeoutError(`jobs ${left.map((q) => q.id).join(", ")} did not end within ${timeoutMs / 1000} s of scancel`, { op: "scancel" });
      await scancel(left.map((q) => q.id), this.env);
      await new Promise((r) => setTimeout(r, 200));
    }
    this.jobs.clear();
  }
}
