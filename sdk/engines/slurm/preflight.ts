/**
 * Before anything is submitted: would Slurm take the jobs an app is about to
 * ask for? Each job is put to `sbatch --test-only` with exactly the options
 * the engine would submit it with (partition, account, extra options, sizes),
 * so an unknown partition, an account Slurm refuses, a size no node of the
 * partition holds or a bad extra option is an error naming what was refused,
 * and no job is left behind.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { parseResreq } from "../../runtime/resreq.js";
import { SlurmError, buildAgentJob, sbatchTestOnly } from "./commands.js";

const run = promisify(execFile);

/** One job an app will submit: `tasks` agents each sized `resreq`. */
export interface PlannedJob {
  /** What it is for, in the error ("the trainer gang"). */
  what: string;
  tasks: number;
  resreq: string;
}

/** The sbatch options the jobs will carry. */
export interface PreflightOptions {
  partition?: string;
  account?: string;
  extraArgs?: string[];
  /** Memory per executor when its resreq names none. Default 512 MiB (as the engine). */
  defaultMem?: number;
  /** Environment of the Slurm commands. Default process.env. */
  env?: NodeJS.ProcessEnv;
}

/** Partitions Slurm knows (for the error), or undefined when sinfo cannot say. */
async function partitions(env: NodeJS.ProcessEnv): Promise<string[] | undefined> {
  try {
    const { stdout } = await run("sinfo", ["-h", "-o", "%R"], { env, timeout: 15_000 });
    return [...new Set(stdout.split("\n").map((l) => l.trim()).filter((l) => l !== ""))];
  } catch {
    return undefined;
  }
}

/** Throws a SlurmError naming the partition, the account or the job Slurm would refuse; resolves when it would take them all. */
export async function checkSlurmJobs(jobs: PlannedJob[], opts: PreflightOptions = {}): Promise<void> {
  const env = opts.env ?? process.env;
  for (const job of jobs) {
    const { args, script } = buildAgentJob({
      name: "hearth.preflight",
      comment: "hearth:preflight",
      tasks: job.tasks,
      resources: parseResreq(job.resreq),
      defaultMem: opts.defaultMem ?? 512 * 1024 * 1024,
      agentCommand: ["true"],
      agentArgs: [],
      output: "/dev/null",
      partition: opts.partition,
      account: opts.account,
      extraArgs: opts.extraArgs,
    });
    try {
      await sbatchTestOnly(args, script, env);
    } catch (err) {
      if (!(err instanceof SlurmError)) throw err;
      const why = err.message;
      if (opts.partition !== undefined && /partition/i.test(why) && !/account/i.test(why)) {
        const known = await partitions(env);
        throw new SlurmError(`Slurm refuses partition '${opts.partition}' (--partition): ${why}${known ? ` (partitions here: ${known.join(", ")})` : ""}`, "sbatch", { cause: err });
      }
      if (opts.account !== undefined && /account/i.test(why)) {
        throw new SlurmError(`Slurm refuses account '${opts.account}' (--account): ${why}`, "sbatch", { cause: err });
      }
      const extra = opts.extraArgs?.length ? ` with ${opts.extraArgs.join(" ")}` : "";
      throw new SlurmError(`Slurm refuses ${job.what} (${job.tasks} task(s) of ${job.resreq}${extra}): ${why}`, "sbatch", { cause: err });
    }
  }
}
