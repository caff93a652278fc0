/**
 * The Slurm engine: hearth agents as Slurm jobs. A pool grows by single-task
 * jobs while calls pend and shrinks when idle; a gang is one job of N tasks,
 * so Slurm grants all members or none. See docs/slurm.md.
 *
 * @example
 * ```ts
 * import { connect } from "hearth";
 *
 * const app = await connect({ name: "rl", engine: "slurm", partition: "gpu", extraArgs: ["--time=04:00:00"] });
 * const pool = await app.service(ref, { resreq: "cpu=4,mem=16g,gpu=1", warmup: 1, max: 8 });
 * console.log((await app.status()).slurm?.jobs);   // job ids, states, nodes
 * await app.close();                               // cancels every job it started
 * ```
 */
export { SlurmEngine, listAppJobs } from "./engine.js";
export type { SlurmEngineOptions, SlurmJobInfo } from "./engine.js";
export { defaultCurveKeys, ensureSlurmHead, findSlurmHead, stopSlurmHead, HEARTH_CLI } from "./head.js";
export type { SlurmHead, SlurmHeadOptions } from "./head.js";
export { SlurmError, buildAgentJob, queueWaitMs, sbatch, sbatchTestOnly, scancel, squeue } from "./commands.js";
export { checkSlurmJobs } from "./preflight.js";
export type { PlannedJob, PreflightOptions } from "./preflight.js";
export type { AgentJobSpec, QueuedJob } from "./commands.js";
export { slurmProvisioner } from "./provisioner.js";
export type { SlurmConnectOptions, SlurmEngineConnectOptions, SlurmStatus } from "./provisioner.js";
