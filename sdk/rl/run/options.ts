/**
 * Options of a Search-R1 run, their defaults and their validation. Defaults
 * come in layers: the generic ones here, then the task recipe's (the
 * reference recipe for a real model, today's values for the tiny preset),
 * then what the caller gave. Everything is checked before any service starts.
 */
import { accessSync, constants, existsSync, mkdirSync, statSync } from "node:fs";
import path from "node:path";
import { parseResreq } from "../../runtime/resreq.js";
import { HearthError } from "../../errors/index.js";
import { OptionError } from "../errors.js";
import type { RunEventHandler } from "./events.js";
import type { ConnectOptions } from "../../connect.js";

/** Options of a run (the CLI flags, with the reference system's meanings). */
export interface RunOptions {
  /** The environment (its package's name, `--env`): a run takes it from the package it is created with. */
  env: string;
  /** `tiny` or a Hugging Face model folder. */
  model: string;
  /** `synthetic` or a HotpotQA JSON file. */
  data: string;
  steps: number;
  promptsPerStep: number;
  /** Prompts per rollout call. */
  promptsPerTask: number;
  groupSize: number;
  rollouts: number;
  trainers: number;
  out: string;
  evalEvery: number;
  evalSize: number;
  lr: number;
  klCoef: number;
  /** Gradient norm clip (0: none). */
  gradClip: number;
  /** Rows per forward/backward on a trainer (gradients accumulate over micro-batches). */
  microBatch: number;
  /** Tool calls allowed per sample (the layer's limit: a call past it is answered without running the tool). */
  maxToolCalls: number;
  /** Passages per search (Search-R1's: its recipes hand it to the environment). */
  topK: number;
  /** The longest one tool call (an environment's step) may take before its sample fails. */
  toolTimeoutMs: number;
  /** Tokens one generation turn may produce. */
  maxTurnTokens: number;
  /** Tokens of a whole response, inserted passages included. */
  maxResponseTokens: number;
  seed: number;
  temperature: number;
  /**
   * A warm-start folder made by `hearth warmstart` to start from instead of the
   * recipe's shipped policy (its manifest must match the recipe and the
   * warm-start options).
   */
  policy?: string;
  /** Supervised warm start steps of the task recipe that has one (the synthetic tasks); 0 skips it. */
  bootstrapSteps: number;
  /** Share of the warm start spent on its final, mixed-behaviour phase. */
  bootstrapMixedShare: number;
  /** Demonstrations per warm-start step. */
  bootstrapBatch: number;
  /** Learning rate of the warm start. */
  bootstrapLr: number;
  /** Resources of each rollout executor, e.g. "cpu=8,mem=64g,gpu=1". */
  rolloutResreq: string;
  /** Resources of each trainer rank. */
  trainerResreq: string;
  /** Rollout weights: bf16 on CUDA and fp32 on CPU with `auto`. */
  rolloutDtype: "auto" | "bfloat16" | "float32";
  /** Torch threads per engine; 0 derives them from the service's cpu request. */
  threads: number;
  /** Trainer collective: nccl when the trainers have GPUs, gloo otherwise, with `auto`. */
  backend: "auto" | "gloo" | "nccl";
  /** How a model folder reaches the trainers: read in place when every trainer's agent runs on this host (auto), or per-file cache objects. */
  modelTransfer: "auto" | "in-place" | "objects";
  /** Warn when the mean |sampler − trainer| logprob gap of a step passes this. */
  logprobGapWarn: number;
  /** The published weights get a fresh base after this many patches… */
  rebaseEvery: number;
  /** …or once the patches outweigh this share of the base. */
  rebaseShare: number;
  /**
   * Policy lag allowed between sampling and training, in published versions.
   * 0: the synchronous loop (rollouts, then update, then publication). K ≥ 1:
   * the rollouts of the next K steps run while the trainers update; a
   * trajectory sampled more than K versions before the trainers' current one
   * is dropped and counted.
   */
  maxLag: number;
  /**
   * Steps whose results (scored samples, trajectory objects) the run keeps
   * for inspection and rescoring; an older step's objects are deleted when it
   * leaves this window.
   */
  keepSteps: number;
  /**
   * Every this many steps (0: never) rank 0's exact trainer state (fp32
   * weights, AdamW moments, steps) and model go into the cache as the run's
   * snapshot, replacing the last one. A trainer gang lost mid-run (a rank's
   * executor, node or Slurm job) is then declared again, restored from the
   * snapshot and the step run again, when the snapshot is of the last
   * completed step; otherwise the run fails naming what was lost. Costs one
   * save a step (12 bytes a parameter through the head): meant for small
   * models and for runs whose trainers may be preempted.
   */
  snapshotEvery: number;
  /** Write the standalone checkpoint at the end of a CLI run (model, trainer state, driver state). */
  checkpoint: boolean;
  /** Replace this app's services when they were declared with other settings (the CLI owns its app). */
  replace: boolean;
  /** A checkpoint folder written by a previous run. */
  resume?: string;
  /** Head endpoint; default the embedded local one (or, with `engine: "slurm"`, the Slurm head of HEARTH_HOME). */
  head?: string;
  /**
   * Where executors run: "local" (the embedded default, or the agents that
   * joined `head`) or "slurm": each rollout executor is a single-task Slurm
   * job, the trainers one job of `trainers` tasks (docs/slurm.md).
   */
  engine: "local" | "slurm";
  /** Slurm: sbatch --partition of every job. */
  partition?: string;
  /** Slurm: sbatch --account of every job. */
  account?: string;
  /** Slurm: more sbatch options, one argument each, as sbatch takes them (e.g. "--time=08:00:00"). */
  sbatchArgs: string[];
  /** Slurm: what the head binds, an address the compute nodes reach (tcp://ADDRESS:PORT; port 0 picks a free one). Default loopback. */
  bind?: string;
  /**
   * SDK only: the rest of `connect()`'s options, e.g. the Slurm engine's
   * environment, polling and agent timeout (`slurm: {...}`) or HEARTH_HOME
   * (`local: { home }`).
   */
  connectOptions?: Omit<ConnectOptions, "name" | "head" | "engine" | "partition" | "account" | "extraArgs">;
  /**
   * An agent (`FILE#EXPORT`: an async function `(item, { baseURL, apiKey,
   * model, signal })` returning the final answer) that the built-in step runs
   * warm in the rollout executors against their OpenAI-compatible endpoint,
   * instead of the task's environment (docs/agents.md).
   */
  agent?: string;
  /** The longest one agent episode may take before its sample fails. */
  agentTimeoutMs: number;
  /** Sampling in an episode session: the run's temperature, top-p and row seed ("run"), or the agent's temperature and top-p ("agent"). */
  agentSampling: "run" | "agent";
  /** How tool calls are parsed from the policy's output: "auto" (from its chat template) or a parser's name ("hermes", "llama3-json"). */
  toolParser: string;
  /** The interface the rollout executors' endpoints bind (default 127.0.0.1: loopback only). */
  endpointHost: string;
  /** How long the endpoint's shared decode waits to gather a batch, and the widest batch. */
  batchWindowMs: number;
  maxBatchRows: number;
  /** The longest one endpoint request may take (504 past it). */
  endpointTimeoutMs: number;
  /**
   * Policy versions kept for replays beyond the live weights object (which
   * holds those since its last re-base): the driver mirrors each publication
   * into chains of its own and drops those more than this many versions old
   * (0: none; each version kept costs its patch in the cache).
   */
  replayVersions: number;
  /** App name (reattach to warm executors). */
  name: string;
  /** Progress lines. */
  log: (line: string) => void;
  /**
   * Service classes standing in for the rollout and trainer services (same
   * methods; e.g. subclasses with a simulated engine, for benchmarks).
   * Default: RolloutService and TrainerService.
   */
  serviceModules?: { rollout?: ServiceSource; trainer?: ServiceSource };
  /** Typed progress (events.ts): the task, executors, warm start, publications, syncs, steps, evaluations. */
  onEvent?: RunEventHandler;
}

/** Where a service class lives: an ES module file and its export. */
export interface ServiceSource {
  module: string;
  export: string;
}

/** What a task recipe may set. */
export type RecipeDefaults = Partial<Omit<RunOptions, "env" | "model" | "data" | "log" | "name" | "out" | "resume" | "policy" | "head" | "replace" | "checkpoint" | "onEvent" | "serviceModules" | "engine" | "partition" | "account" | "sbatchArgs" | "bind" | "connectOptions" | "agent">>;

/** The generic defaults, sized for the tiny preset on 2 CPU cores (a recipe's own override them). */
export const BASE_OPTIONS: RunOptions = {
  env: "searchr1",
  model: "tiny",
  data: "synthetic",
  steps: 150,
  promptsPerStep: 16,
  promptsPerTask: 4,
  groupSize: 8,
  rollouts: 2,
  trainers: 2,
  out: "out",
  evalEvery: 10,
  evalSize: 200,
  lr: 1e-3,
  klCoef: 0.001,
  gradClip: 1.0,
  microBatch: 16,
  maxToolCalls: 4,
  topK: 3,
  toolTimeoutMs: 30_000,
  maxTurnTokens: 64,
  maxResponseTokens: 320,
  seed: 1,
  temperature: 1,
  bootstrapSteps: 0,
  bootstrapMixedShare: 0.3,
  bootstrapBatch: 32,
  bootstrapLr: 3e-3,
  rolloutResreq: "cpu=0.5",
  trainerResreq: "cpu=0.5",
  rolloutDtype: "auto",
  threads: 0,
  backend: "auto",
  modelTransfer: "auto",
  logprobGapWarn: 0.05,
  rebaseEvery: 20,
  rebaseShare: 0.5,
  maxLag: 0,
  keepSteps: 50,
  snapshotEvery: 0,
  replace: false,
  checkpoint: true,
  engine: "local",
  sbatchArgs: [],
  agentTimeoutMs: 120_000,
  agentSampling: "run",
  toolParser: "auto",
  endpointHost: "127.0.0.1",
  batchWindowMs: 4,
  maxBatchRows: 256,
  endpointTimeoutMs: 120_000,
  replayVersions: 0,
  name: "search-r1",
  log: (line) => console.log(line),
};

/** Layers the defaults: generic, then the recipe's, then what the caller set (undefined values are ignored). */
export function layerOptions(recipe: RecipeDefaults, given: Partial<RunOptions>): RunOptions {
  const set = Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined)) as Partial<RunOptions>;
  return { ...BASE_OPTIONS, ...recipe, ...set };
}

/** The CLI spelling of an option. */
export function flagName(key: string): string {
  return `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
}

const WHOLE: Record<string, number> = {
  steps: 0,
  promptsPerStep: 1,
  promptsPerTask: 1,
  groupSize: 1,
  rollouts: 1,
  trainers: 1,
  evalEvery: 0,
  evalSize: 1,
  microBatch: 1,
  maxToolCalls: 0,
  topK: 1,
  toolTimeoutMs: 1,
  maxTurnTokens: 1,
  maxResponseTokens: 1,
  bootstrapSteps: 0,
  bootstrapBatch: 1,
  threads: 0,
  seed: 0,
  rebaseEvery: 1,
  maxLag: 0,
  keepSteps: 1,
  snapshotEvery: 0,
  agentTimeoutMs: 1,
  batchWindowMs: 0,
  maxBatchRows: 1,
  endpointTimeoutMs: 1,
  replayVersions: 0,
};
const CHOICES: Record<string, readonly string[]> = {
  rolloutDtype: ["auto", "bfloat16", "float32"],
  backend: ["auto", "gloo", "nccl"],
  modelTransfer: ["auto", "in-place", "objects"],
  agentSampling: ["run", "agent"],
};

/** Checks every option; the error names the flag, what it got and what is accepted. */
export function validateOptions(o: RunOptions): void {
  for (const [k, min] of Object.entries(WHOLE)) {
    const v = o[k as keyof RunOptions];
    if (typeof v !== "number" || !Number.isInteger(v) || v < min) throw new OptionError(`${flagName(k)} must be a whole number ≥ ${min}; got ${String(v)}`, { flag: flagName(k) });
  }
  for (const k of ["lr", "klCoef", "temperature", "gradClip", "logprobGapWarn", "rebaseShare", "bootstrapMixedShare", "bootstrapLr"] as const) {
    if (typeof o[k] !== "number" || !Number.isFinite(o[k]) || o[k] < 0) throw new OptionError(`${flagName(k)} must be a number ≥ 0; got ${String(o[k])}`, { flag: flagName(k) });
  }
  for (const [k, allowed] of Object.entries(CHOICES)) {
    const v = o[k as keyof RunOptions];
    if (typeof v !== "string" || !allowed.includes(v)) throw new OptionError(`${flagName(k)} must be one of ${allowed.join(", ")}; got ${String(v)}`, { flag: flagName(k) });
  }
  for (const k of ["rolloutResreq", "trainerResreq"] as const) {
    try {
      const r = parseResreq(o[k]);
      if (r.cpu <= 0) throw new HearthError(`cpu must be > 0`);
    } catch (err) {
      throw new OptionError(`${flagName(k)} ${JSON.stringify(o[k])}: ${(err as Error).message}`, { flag: flagName(k), cause: err });
    }
  }
  if (o.maxTurnTokens > o.maxResponseTokens) throw new OptionError(`--max-turn-tokens (${o.maxTurnTokens}) cannot exceed --max-response-tokens (${o.maxResponseTokens})`, { flag: "--max-turn-tokens" });
  if (o.backend === "nccl" && parseResreq(o.trainerResreq).gpu < 1) throw new OptionError(`--backend nccl needs trainers with a GPU: add gpu=1 to --trainer-resreq (now "${o.trainerResreq}")`, { flag: "--backend" });
  if (o.policy !== undefined && !existsSync(path.join(o.policy, "warmstart.json"))) {
    throw new OptionError(`--policy ${o.policy}: no warmstart.json there (expected a folder made by 'hearth warmstart --out DIR')`, { flag: "--policy" });
  }
  if (o.resume && !existsSync(path.join(o.resume, "driver-state.json"))) {
    throw new OptionError(`--resume ${o.resume}: no driver-state.json there (expected a folder written by a previous run's checkpoint)`, { flag: "--resume" });
  }
  checkAgent(o);
  checkEngine(o);
  checkOut(o.out);
}

/** `--agent FILE#EXPORT` names a file that exists (made absolute: the executors import it); the endpoint's host is an address. */
function checkAgent(o: RunOptions): void {
  if (o.agent !== undefined) {
    const at = o.agent.lastIndexOf("#");
    const file = at > 0 ? o.agent.slice(0, at) : o.agent;
    const exp = at > 0 ? o.agent.slice(at + 1) : "default";
    if (file === "" || exp === "" || !/^[A-Za-z_$][\w$]*$/.test(exp)) throw new OptionError(`--agent ${o.agent}: expected FILE#EXPORT (e.g. ./my-agent.js#solve)`, { flag: "--agent" });
    const abs = file.startsWith("file:") ? file : path.resolve(file);
    if (!abs.startsWith("file:") && !existsSync(abs)) throw new OptionError(`--agent ${o.agent}: no file ${abs}`, { flag: "--agent" });
    o.agent = `${abs}#${exp}`;
  }
  if (typeof o.endpointHost !== "string" || !/^[A-Za-z0-9.:-]+$/.test(o.endpointHost)) throw new OptionError(`--endpoint-host must be an address to bind (127.0.0.1, 0.0.0.0, a host name); got ${JSON.stringify(o.endpointHost)}`, { flag: "--endpoint-host" });
  if (typeof o.toolParser !== "string" || o.toolParser === "") throw new OptionError(`--tool-parser must name a parser (auto, hermes, llama3-json); got ${JSON.stringify(o.toolParser)}`, { flag: "--tool-parser" });
}

/** sbatch options hearth writes itself for every job (docs/slurm.md, "What becomes a job"), and what to use instead. */
const SBATCH_OWN: Record<string, string> = {
  "--partition": "use --partition",
  "-p": "use --partition",
  "--account": "use --account",
  "-A": "use --account",
  "--job-name": "jobs are named hearth.<app>: use --name",
  "-J": "jobs are named hearth.<app>: use --name",
  "--comment": "hearth finds its jobs by their comment",
  "--ntasks": "set by --rollouts (one job each) and --trainers (one job of that many tasks)",
  "-n": "set by --rollouts and --trainers",
  "--cpus-per-task": "use cpu= in --rollout-resreq / --trainer-resreq",
  "-c": "use cpu= in --rollout-resreq / --trainer-resreq",
  "--mem": "use mem= in --rollout-resreq / --trainer-resreq",
  "--mem-per-cpu": "use mem= in --rollout-resreq / --trainer-resreq",
  "--gpus-per-task": "use gpu= in --rollout-resreq / --trainer-resreq",
  "--output": "job output goes to $HEARTH_HOME/slurm/<job id>.out",
  "-o": "job output goes to $HEARTH_HOME/slurm/<job id>.out",
  "--parsable": "hearth reads sbatch's answer itself",
};

/** The engine's flags: known engine, Slurm flags only with `--engine slurm`, each well-formed (Slurm itself is asked before any job is submitted). */
function checkEngine(o: RunOptions): void {
  if (o.engine !== "local" && o.engine !== "slurm") throw new OptionError(`--engine must be one of local, slurm; got ${String(o.engine)}`, { flag: "--engine" });
  if (!Array.isArray(o.sbatchArgs) || o.sbatchArgs.some((a) => typeof a !== "string")) throw new OptionError(`--sbatch-arg values must be strings; got ${JSON.stringify(o.sbatchArgs)}`, { flag: "--sbatch-arg" });
  const slurmOnly = { partition: o.partition, account: o.account, bind: o.bind, sbatchArgs: o.sbatchArgs.length > 0 ? o.sbatchArgs : undefined };
  if (o.engine !== "slurm") {
    for (const [k, v] of Object.entries(slurmOnly)) {
      const flag = k === "sbatchArgs" ? "--sbatch-arg" : flagName(k);
      if (v !== undefined) throw new OptionError(`${flag} needs --engine slurm (the ${o.engine} engine submits no Slurm jobs)`, { flag });
    }
    return;
  }
  if (o.partition !== undefined && !/^[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*$/.test(o.partition)) {
    throw new OptionError(`--partition must name Slurm partitions (letters, digits, '_', '.', '-', comma-separated); got ${JSON.stringify(o.partition)}`, { flag: "--partition" });
  }
  if (o.account !== undefined && !/^[A-Za-z0-9_.+-]+$/.test(o.account)) throw new OptionError(`--account must name one Slurm account (letters, digits, '_', '.', '-'); got ${JSON.stringify(o.account)}`, { flag: "--account" });
  for (const a of o.sbatchArgs) {
    if (!/^-{1,2}[A-Za-z]/.test(a) || /\s/.test(a.split("=")[0]!)) {
      throw new OptionError(`--sbatch-arg ${JSON.stringify(a)}: each --sbatch-arg is one sbatch option, with its value after '=' (e.g. --sbatch-arg=--time=08:00:00)`, { flag: "--sbatch-arg" });
    }
    const name = a.startsWith("--") ? a.split("=")[0]! : a.slice(0, 2);
    const why = SBATCH_OWN[name];
    if (why) throw new OptionError(`--sbatch-arg ${a}: hearth sets ${name} itself (${why})`, { flag: "--sbatch-arg" });
  }
  if (o.bind !== undefined) {
    const m = /^tcp:\/\/([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(\d{1,5})$/.exec(o.bind);
    if (!m || Number(m[2]) > 65535) throw new OptionError(`--bind must be tcp://ADDRESS:PORT, an address the compute nodes reach (port 0: any free one); got ${JSON.stringify(o.bind)}`, { flag: "--bind" });
    if (o.head !== undefined) throw new OptionError(`--bind starts this machine's Slurm head on that address and --head names a running one: give one of them`, { flag: "--bind" });
  }
}

/** `--out` must be a folder we can write (made if missing) before any service starts. */
function checkOut(out: string): void {
  try {
    if (existsSync(out) && !statSync(out).isDirectory()) throw new Error("it exists and is not a folder");
    mkdirSync(out, { recursive: true });
    accessSync(out, constants.W_OK);
  } catch (err) {
    throw new OptionError(`--out ${out}: cannot write results there (${(err as Error).message}); pick a writable folder`, { flag: "--out", cause: err });
  }
}

/** Torch threads for a service: the option, or the whole CPUs its resreq asks for (at least 1). */
export function threadsFor(o: RunOptions, resreq: string): number {
  return o.threads > 0 ? o.threads : Math.max(1, Math.floor(parseResreq(resreq).cpu));
}

/** The collective the trainers use. */
export function backendFor(o: RunOptions): "gloo" | "nccl" {
  if (o.backend !== "auto") return o.backend;
  return parseResreq(o.trainerResreq).gpu > 0 ? "nccl" : "gloo";
}
