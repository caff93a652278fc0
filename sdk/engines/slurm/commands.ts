/**
 * Slurm's command line as the engine uses it: `sbatch` for a job script,
 * `squeue` for states, `scancel` to end jobs. The job script is built by a
 * pure function so what hearth asks Slurm for is easy to read and test.
 */
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import type { Resources } from "../../runtime/resreq.js";
import { HearthError } from "../../errors/index.js";

const run = promisify(execFile);
const MiB = 1024 * 1024;

/** A Slurm command failed (sbatch refused a job, squeue could not reach slurmctld, ...). */
export class SlurmError extends HearthError {
  override name = "SlurmError";
  constructor(
    message: string,
    /** The command that failed, e.g. "sbatch". */
    readonly command: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** What one job should run: `tasks` agents, each sized for one executor of a service. */
export interface AgentJobSpec {
  /** Job name (squeue finds the app's jobs by it). */
  name: string;
  /** Free text Slurm keeps with the job: the engine's `hearth:<head id>:<service id>`. */
  comment: string;
  /** 1 for a pool's job; N for a gang (one job, N tasks: Slurm grants all or none). */
  tasks: number;
  /** One executor's resources; each task gets exactly this. */
  resources: Resources;
  /** Memory per task when the resreq names none, in bytes. */
  defaultMem: number;
  /** The command that starts node + the hearth CLI, e.g. ["/usr/bin/node", "/opt/hearth/dist/cluster-agent/cli.js"]. */
  agentCommand: string[];
  /** Arguments after `agent` common to every task (head endpoint, labels). */
  agentArgs: string[];
  /** Where Slurm writes the job's output (`%j` is the job id). */
  output: string;
  partition?: string;
  account?: string;
  /** More sbatch options, passed as they are (e.g. ["--time=04:00:00", "--constraint=a100"]). */
  extraArgs?: string[];
  /** Environment lines exported in the script before srun. */
  env?: Record<string, string>;
}

function shellQuote(s: string): string {
  return /^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * The sbatch options and the batch script for a job of agents. Each task is
 * one `hearth agent` started by `srun`, sized for one executor; its id and
 * rank label come from SLURM_JOB_ID / SLURM_PROCID, its GPUs from the
 * CUDA_VISIBLE_DEVICES Slurm sets (`--gpus 0` when the job has none, so the
 * agent never claims the node's GPUs on its own).
 */
export function buildAgentJob(spec: AgentJobSpec): { args: string[]; script: string } {
  const cpus = Math.max(1, Math.ceil(spec.resources.cpu));
  const memBytes = spec.resources.mem > 0 ? spec.resources.mem : spec.defaultMem;
  const memPerCpuMiB = Math.max(1, Math.ceil(memBytes / MiB / cpus));
  const gpus = spec.resources.gpu;
  const args = [
    "--parsable",
    `--job-name=${spec.name}`,
    `--comment=${spec.comment}`,
    `--ntasks=${spec.tasks}`,
    `--cpus-per-task=${cpus}`,
    // Per CPU, not per node: the tasks of a gang may share a node or not.
    `--mem-per-cpu=${memPerCpuMiB}M`,
    `--output=${spec.output}`,
  ];
  if (gpus > 0) args.push(`--gpus-per-task=${gpus}`);
  if (spec.partition) args.push(`--partition=${spec.partition}`);
  if (spec.account) args.push(`--account=${spec.account}`);
  args.push(...(spec.extraArgs ?? []));

  const agent = [...spec.agentCommand, "agent", ...spec.agentArgs, "--cpus", String(cpus), "--mem", String(memBytes)];
  if (gpus === 0) agent.push("--gpus", "0");
  const perTask = 'exec "$0" "$@" --id "slurm-$SLURM_JOB_ID-$SLURM_PROCID" --label "hearth.job=$SLURM_JOB_ID" --label "hearth.rank=$SLURM_PROCID"';
  const srun = ["srun", "--kill-on-bad-exit=0", `--ntasks=${spec.tasks}`, `--cpus-per-task=${cpus}`];
  if (gpus > 0) srun.push(`--gpus-per-task=${gpus}`);
  const script = [
    "#!/bin/bash",
    `# hearth: ${spec.tasks} agent(s) for ${spec.comment}`,
    ...Object.entries(spec.env ?? {}).map(([k, v]) => `export ${k}=${shellQuote(v)}`),
    `exec ${srun.join(" ")} /bin/bash -c ${shellQuote(perTask)} ${agent.map(shellQuote).join(" ")}`,
    "",
  ].join("\n");
  return { args, script };
}

/**
 * The environment a job inherits from the submitting process (sbatch exports
 * it all): without TMPDIR when that is the submitting executor's own temp
 * folder (HEARTH_EXECUTOR_TMPDIR, set by its agent): that folder is private
 * to the executor (0700, removed at its exit), and a job's agent would put its
 * executors' folders inside it, where their users cannot reach them.
 */
export function jobEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  if (!env.HEARTH_EXECUTOR_TMPDIR || env.TMPDIR !== env.HEARTH_EXECUTOR_TMPDIR) return env;
  const { TMPDIR: _tmp, HEARTH_EXECUTOR_TMPDIR: _mine, ...rest } = env;
  return rest;
}

/** Runs `sbatch` with the script on stdin and returns the job id. */
export function sbatch(args: string[], script: string, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn("sbatch", args, { env: jobEnv(env), stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    p.stdout.on("data", (d: Buffer) => (out += d.toString()));
    p.stderr.on("data", (d: Buffer) => (err += d.toString()));
    p.on("error", (e) => reject(new SlurmError(`could not run sbatch: ${e.message} (is Slurm's client installed and on PATH?)`, "sbatch", { cause: e })));
    p.on("close", (code) => {
      const id = /^(\d+)/.exec(out.trim())?.[1];
      if (code === 0 && id) resolve(id);
      else reject(new SlurmError(`sbatch ${args.join(" ")} failed (exit ${code}): ${err.trim() || out.trim()}`, "sbatch"));
    });
    p.stdin.end(script);
  });
}

/**
 * Asks Slurm whether it would take a job (`sbatch --test-only`: checked and
 * scheduled on paper, never submitted): an unknown partition, an account it
 * refuses, a request no node of the partition can hold, or a bad extra
 * option fails here. Resolves with sbatch's answer ("Job N to start at …").
 */
export function sbatchTestOnly(args: string[], script: string, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn("sbatch", ["--test-only", ...args.filter((a) => a !== "--parsable")], { env, stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (d: Buffer) => (out += d.toString()));
    p.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill("SIGKILL"), 30_000);
    p.on("error", (e) => {
      clearTimeout(timer);
      reject(new SlurmError(`could not run sbatch: ${e.message} (is Slurm's client installed and on PATH?)`, "sbatch", { cause: e }));
    });
    p.on("close", (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(out.trim());
      else {
        const lines = out.split("\n").map((l) => l.replace(/^sbatch: (error: )?/, "").trim()).filter((l) => l !== "");
        reject(new SlurmError(lines.join("; ") || `sbatch --test-only exited ${code}`, "sbatch"));
      }
    });
    p.stdin.end(script);
  });
}

/** One job as squeue shows it. */
export interface QueuedJob {
  id: string;
  /** PENDING, RUNNING, COMPLETING, ... */
  state: string;
  name: string;
  comment: string;
  /** Node list when running; the reason (e.g. "Resources") when pending. */
  where: string;
  /** When sbatch handed it to Slurm (ms since the epoch), if Slurm says. */
  submittedAt: number | null;
  /** When it started running (ms since the epoch); null while pending. */
  startedAt: number | null;
}

/** Slurm prints times as local ISO dates without an offset ("2026-12-01T02:30:11"), or N/A / Unknown / None. */
function slurmTime(text: string | undefined): number | null {
  if (!text || !/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/.test(text)) return null;
  const t = new Date(text).getTime(); // no offset: local time, as Slurm printed it
  return Number.isFinite(t) ? t : null;
}

/** How long a job waited in Slurm's queue: submit to start, or submit to now while it is still pending. */
export function queueWaitMs(job: Pick<QueuedJob, "state" | "submittedAt" | "startedAt">, now = Date.now()): number | null {
  if (job.submittedAt === null) return null;
  if (job.state === "PENDING") return Math.max(0, now - job.submittedAt);
  return job.startedAt === null ? null : Math.max(0, job.startedAt - job.submittedAt);
}

/** Jobs with this name that Slurm still knows (pending, running, completing). */
export async function squeue(name: string, env: NodeJS.ProcessEnv): Promise<QueuedJob[]> {
  let stdout: string;
  try {
    ({ stdout } = await run("squeue", ["-h", `--name=${name}`, "-o", "%i|%T|%j|%k|%R|%V|%S"], { env, timeout: 30_000 }));
  } catch (err) {
    throw new SlurmError(`squeue failed: ${(err as Error).message}`, "squeue", { cause: err });
  }
  return stdout
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => {
      const [id, state, jobName, comment, where, submitted, started] = l.split("|");
      // A pending job's %S is Slurm's guess at its start (or N/A): not a start.
      return { id: id!, state: state!, name: jobName!, comment: comment ?? "", where: where ?? "", submittedAt: slurmTime(submitted), startedAt: state === "PENDING" ? null : slurmTime(started) };
    });
}

/** Cancels jobs (no error for jobs that already ended). */
export async function scancel(ids: string[], env: NodeJS.ProcessEnv): Promise<void> {
  if (ids.length === 0) return;
  try {
    await run("scancel", ids, { env, timeout: 30_000 });
  } catch (err) {
    const text = String((err as { stderr?: string }).stderr ?? (err as Error).message);
    if (!/Invalid job id|already completing|Job has already finished/i.test(text)) {
      throw new SlurmError(`scancel ${ids.join(" ")} failed: ${text.trim()}`, "scancel", { cause: err });
    }
  }
}
