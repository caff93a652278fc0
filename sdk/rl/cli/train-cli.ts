/**
 * `hearth train ENV …`: the command line of training, for any environment
 * package the caller registers (`search-r1` with the reference system's flag
 * meanings, `calculator`), with progress on the terminal, a summary table,
 * metrics.jsonl and an HTML report in --out.
 */
import { parseArgs } from "node:util";
import { HearthError } from "../../errors/index.js";
import { terminalProgress, warmStartClock } from "../run/events.js";
import { detachRun } from "../cluster/detached.js";
import { finishSession } from "../report/finish.js";
import { emByCategory } from "../run/pipeline.js";
import { emByText, stepRow } from "../report/report.js";
import { AgentRun, type RunOptions } from "../run/run.js";

export { stepRow };
import type { EnvironmentPackage } from "../run/recipe.js";

/** Numeric flags and the option each sets. */
const NUMERIC = {
  steps: "steps",
  "prompts-per-step": "promptsPerStep",
  "prompts-per-task": "promptsPerTask",
  "group-size": "groupSize",
  rollouts: "rollouts",
  trainers: "trainers",
  "eval-every": "evalEvery",
  "eval-size": "evalSize",
  lr: "lr",
  "kl-coef": "klCoef",
  "grad-clip": "gradClip",
  "micro-batch": "microBatch",
  "max-tool-calls": "maxToolCalls",
  // Search-R1's name for it, kept.
  "max-searches": "maxToolCalls",
  "top-k": "topK",
  "tool-timeout-ms": "toolTimeoutMs",
  "max-turn-tokens": "maxTurnTokens",
  "max-response-tokens": "maxResponseTokens",
  seed: "seed",
  temperature: "temperature",
  "bootstrap-steps": "bootstrapSteps",
  "bootstrap-mixed-share": "bootstrapMixedShare",
  "bootstrap-batch": "bootstrapBatch",
  "bootstrap-lr": "bootstrapLr",
  threads: "threads",
  "logprob-gap-warn": "logprobGapWarn",
  "rebase-every": "rebaseEvery",
  "rebase-share": "rebaseShare",
  "max-lag": "maxLag",
  "keep-steps": "keepSteps",
  "snapshot-every": "snapshotEvery",
  "agent-timeout-ms": "agentTimeoutMs",
  "batch-window-ms": "batchWindowMs",
  "max-batch-rows": "maxBatchRows",
  "endpoint-timeout-ms": "endpointTimeoutMs",
  "replay-versions": "replayVersions",
} as const satisfies Record<string, keyof RunOptions>;

/** Text flags and the option each sets. */
const TEXT = {
  model: "model",
  data: "data",
  out: "out",
  "rollout-resreq": "rolloutResreq",
  "trainer-resreq": "trainerResreq",
  "rollout-dtype": "rolloutDtype",
  backend: "backend",
  "model-transfer": "modelTransfer",
  resume: "resume",
  policy: "policy",
  head: "head",
  name: "name",
  engine: "engine",
  partition: "partition",
  account: "account",
  bind: "bind",
  agent: "agent",
  "agent-sampling": "agentSampling",
  "tool-parser": "toolParser",
  "endpoint-host": "endpointHost",
} as const satisfies Record<string, keyof RunOptions>;

const FLAGS = {
  ...Object.fromEntries([...Object.keys(NUMERIC), ...Object.keys(TEXT)].map((k) => [k, { type: "string" as const }])),
  "sbatch-arg": { type: "string" as const, multiple: true as const },
  "no-checkpoint": { type: "boolean" as const },
  detach: { type: "boolean" as const },
  help: { type: "boolean" as const },
  task: { type: "string" as const },
};

/** Usage text of `hearth train`. */
export const TRAIN_USAGE = `usage: hearth train search-r1|calculator|agent-calculator|agent-chain [--model tiny|HF_DIR] [--data synthetic|hotpotqa.json] [--steps N]
  [--prompts-per-step N] [--prompts-per-task N] [--group-size G] [--rollouts N] [--trainers N]
  [--out DIR] [--eval-every N] [--eval-size N] [--lr X] [--kl-coef X] [--grad-clip X] [--micro-batch N]
  [--max-tool-calls N (alias --max-searches)] [--top-k N] [--tool-timeout-ms MS] [--max-turn-tokens N] [--max-response-tokens N] [--seed N] [--temperature T]
  [--bootstrap-steps N] [--bootstrap-mixed-share X] [--bootstrap-batch N] [--bootstrap-lr X] [--rollout-resreq "cpu=8,mem=64g,gpu=1"] [--trainer-resreq RESREQ]
  [--rollout-dtype auto|bfloat16|float32] [--threads N] [--backend auto|gloo|nccl] [--model-transfer auto|in-place|objects] [--logprob-gap-warn X] [--rebase-every N] [--rebase-share X]
  [--max-lag K] [--keep-steps N] [--snapshot-every N] [--policy WARMSTART_DIR] [--resume CHECKPOINT_DIR] [--no-checkpoint] [--head tcp://HOST:PORT] [--name APP] [--detach]
  [--engine local|slurm] [--partition P] [--account A] [--sbatch-arg=ARG]... [--bind tcp://ADDRESS:PORT]
  [--agent FILE#EXPORT] [--agent-timeout-ms MS] [--agent-sampling run|agent] [--tool-parser auto|hermes|llama3-json] [--endpoint-host 127.0.0.1]
  [--batch-window-ms MS] [--max-batch-rows N] [--endpoint-timeout-ms MS] [--replay-versions N]
       hearth train agent --task calculator|chain --agent FILE#EXPORT [the flags above]
With --agent the episodes are the agent's: an async function (item, { baseURL, apiKey, model, signal }) using any OpenAI-compatible
client against the rollout executors' endpoint, run warm beside the model; its answer is scored (docs/agents.md).
With --detach the loop runs on the cluster as a service of the run's app and the command returns at once (hearth runs|attach|pause|resume|stop|fetch; docs/searchr1.md).
With --engine slurm each rollout executor is a Slurm job and the trainers one job of --trainers tasks; --bind is an address the compute nodes reach (docs/slurm.md).
Defaults come from the task recipe: the tiny preset's for --model tiny, the reference recipe for a model folder (docs/searchr1.md).`;

function num(flag: string, v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new HearthError(`--${flag} must be a number; got '${v}'\n${TRAIN_USAGE}`);
  return n;
}

/** Parses flags into the options they set (the rest come from the recipe); unknown flags and bad numbers are clear errors. */
export function parseTrainFlags(args: string[]): Partial<RunOptions> {
  let values: Record<string, string | undefined> & { "sbatch-arg"?: string[] };
  try {
    values = parseArgs({ args, options: FLAGS, strict: true }).values as typeof values;
  } catch (err) {
    throw new HearthError(`${(err as Error).message}\n${TRAIN_USAGE}`);
  }
  const out: Record<string, unknown> = {};
  if (values.task !== undefined) throw new HearthError(`--task goes with 'hearth train agent' only (hearth train agent --task calculator|chain --agent FILE#EXPORT)\n${TRAIN_USAGE}`);
  if (values["no-checkpoint"]) out.checkpoint = false;
  if (values.detach) out.detach = true;
  if (values["sbatch-arg"] !== undefined) out.sbatchArgs = values["sbatch-arg"];
  for (const [flag, key] of Object.entries(NUMERIC)) {
    const v = values[flag];
    if (v !== undefined) out[key] = num(flag, v);
  }
  for (const [flag, key] of Object.entries(TEXT)) if (values[flag] !== undefined) out[key] = values[flag];
  return out as Partial<RunOptions>;
}

/**
 * `hearth train agent --task T --agent FILE#EXPORT …`: the agent task T's
 * package (`agent-T`), the agent required; the other flags as they are.
 */
function agentWorkload(args: string[], workloads: Workloads): { workload: string; rest: string[] } {
  const tasks = Object.keys(workloads).filter((w) => w.startsWith("agent-")).map((w) => w.slice("agent-".length));
  const rest: string[] = [];
  let task: string | undefined;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--task") task = args[++i];
    else if (a.startsWith("--task=")) task = a.slice("--task=".length);
    else rest.push(a);
  }
  if (args.includes("--help")) return { workload: `agent-${task ?? tasks[0]}`, rest };
  if (task === undefined || !tasks.includes(task)) throw new HearthError(`hearth train agent needs --task ${tasks.join("|")} (got ${task === undefined ? "none" : `'${task}'`})\n${TRAIN_USAGE}`);
  if (!rest.some((a) => a === "--agent" || a.startsWith("--agent="))) throw new HearthError(`hearth train agent needs --agent FILE#EXPORT: your agent, an async function (item, { baseURL, apiKey, model, signal }) returning its final answer\n${TRAIN_USAGE}`);
  return { workload: `agent-${task}`, rest };
}

/** The environment packages `hearth train WORKLOAD` knows, by workload name. */
export type Workloads = Readonly<Record<string, EnvironmentPackage>>;

/** Runs `hearth train WORKLOAD` with the package `workloads` names for it; returns the exit code. */
export async function runTrainCommand(args: string[], workloads: Workloads): Promise<number> {
  const [named, ...given_] = args;
  const { workload, rest } = named === "agent" ? agentWorkload(given_, workloads) : { workload: named, rest: given_ };
  const pkg = workload === undefined ? undefined : workloads[workload];
  if (!pkg) throw new HearthError(`unknown workload '${workload ?? ""}': hearth trains ${Object.keys(workloads).join(", ")}\n${TRAIN_USAGE}`);
  if (rest.includes("--help")) {
    console.log(TRAIN_USAGE);
    return 0;
  }
  const { detach, ...given } = parseTrainFlags(rest) as Partial<RunOptions> & { detach?: boolean };
  if (detach) {
    const status = await detachRun(given, pkg);
    console.log(`run '${status.name}' started on the cluster: its loop runs on ${status.where.host} (executor ${status.where.executorId})`);
    console.log(`  follow it:   hearth attach ${status.name}      (Ctrl-C detaches; the run goes on)`);
    console.log(`  list runs:   hearth runs`);
    console.log(`  control it:  hearth pause|resume|stop ${status.name}`);
    console.log(`  its outputs: hearth fetch ${status.name} --out DIR   (once it is done)`);
    return 0;
  }
  const t0 = performance.now();
  // The CLI owns its app: other flags than last time replace its services instead of failing.
  const clock = warmStartClock(terminalProgress());
  const run = await AgentRun.create({ ...given, replace: true, onEvent: clock.onEvent }, pkg);
  const opts = run.opts;
  // Ctrl-C stops after the step in flight; the metrics, checkpoint and report are still written and the app released. A second Ctrl-C exits at once.
  const stop = new AbortController();
  const onSigint = (): void => {
    if (stop.signal.aborted) process.exit(130);
    opts.log("interrupted: stopping after the current step (Ctrl-C again to exit at once)");
    stop.abort();
  };
  process.on("SIGINT", onSigint);
  try {
    const first = await run.evaluate();
    const emBy = emByCategory(first);
    const env = run.task.environment;
    opts.log(`held-out EM before RL: ${(first.em * 100).toFixed(1)}% (${opts.evalSize} ${env.items ?? "items"}, greedy)${emBy ? ` (${emByText(emBy)})` : ""}, ${env.words.calls}/sample ${first.callsPerSample.toFixed(2)}`);
    const startEval = { step: run.stepsDone, em: first.em, calls: first.callsPerSample, emBy };
    const setupSeconds = (performance.now() - t0) / 1000;
    const before = run.history.length;
    await run.train(opts.steps, { progress: false, signal: stop.signal, onStep: (r) => opts.log(stepRow(r.metrics)) });
    const done = await finishSession(run, { t0, startEval, setupSeconds, before, warmStart: clock.warmStart() });
    console.log(`\n${done.summary}\n`);
    console.log(`metrics: ${opts.out}/metrics.jsonl   report: ${done.report}   checkpoint: ${done.checkpoint}`);
    return stop.signal.aborted ? 130 : 0;
  } finally {
    process.off("SIGINT", onSigint);
    // A command-line run is over: release its executors (a notebook keeps them warm instead).
    await run.close().catch(() => undefined);
  }
}
