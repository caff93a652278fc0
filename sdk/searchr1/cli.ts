/**
 * `hearth train search-r1 …`: the command line of Search-R1 training, with the
 * reference system's flag meanings, progress on the terminal, a summary table,
 * metrics.jsonl and an HTML report in --out.
 */
import { parseArgs } from "node:util";
import { HearthError } from "../wire/errors.js";
import { writeReport } from "./report.js";
import { DEFAULTS, SearchR1Run, type SearchR1Options, type StepMetrics } from "./run.js";

const FLAGS = {
  model: { type: "string" },
  data: { type: "string" },
  steps: { type: "string" },
  "prompts-per-step": { type: "string" },
  "prompts-per-task": { type: "string" },
  "group-size": { type: "string" },
  rollouts: { type: "string" },
  trainers: { type: "string" },
  out: { type: "string" },
  "eval-every": { type: "string" },
  "eval-size": { type: "string" },
  lr: { type: "string" },
  "kl-coef": { type: "string" },
  "max-searches": { type: "string" },
  seed: { type: "string" },
  temperature: { type: "string" },
  "bootstrap-steps": { type: "string" },
  resume: { type: "string" },
  head: { type: "string" },
  name: { type: "string" },
} as const;

/** Usage text of `hearth train search-r1`. */
export const TRAIN_USAGE = `usage: hearth train search-r1 [--model tiny|HF_DIR] [--data synthetic|hotpotqa.json] [--steps N]
  [--prompts-per-step N] [--prompts-per-task N] [--group-size G] [--rollouts N] [--trainers N]
  [--out DIR] [--eval-every N] [--eval-size N] [--lr X] [--kl-coef X] [--max-searches N] [--seed N]
  [--temperature T] [--bootstrap-steps N] [--resume CHECKPOINT_DIR] [--head tcp://HOST:PORT] [--name APP]`;

function num(flag: string, v: string | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n)) throw new HearthError(`--${flag} must be a number; got '${v}'\n${TRAIN_USAGE}`);
  return n;
}

/** Parses flags into run options; unknown flags and bad numbers are clear errors. */
export function parseTrainFlags(args: string[]): SearchR1Options {
  let values: Record<string, string | undefined>;
  try {
    values = parseArgs({ args, options: FLAGS, strict: true }).values as Record<string, string | undefined>;
  } catch (err) {
    throw new HearthError(`${(err as Error).message}\n${TRAIN_USAGE}`);
  }
  const d = DEFAULTS;
  return {
    ...d,
    model: values.model ?? d.model,
    data: values.data ?? d.data,
    steps: num("steps", values.steps, d.steps),
    promptsPerStep: num("prompts-per-step", values["prompts-per-step"], d.promptsPerStep),
    promptsPerTask: num("prompts-per-task", values["prompts-per-task"], d.promptsPerTask),
    groupSize: num("group-size", values["group-size"], d.groupSize),
    rollouts: num("rollouts", values.rollouts, d.rollouts),
    trainers: num("trainers", values.trainers, d.trainers),
    out: values.out ?? d.out,
    evalEvery: num("eval-every", values["eval-every"], d.evalEvery),
    evalSize: num("eval-size", values["eval-size"], d.evalSize),
    lr: num("lr", values.lr, d.lr),
    klCoef: num("kl-coef", values["kl-coef"], d.klCoef),
    maxSearches: num("max-searches", values["max-searches"], d.maxSearches),
    seed: num("seed", values.seed, d.seed),
    temperature: num("temperature", values.temperature, d.temperature),
    bootstrapSteps: num("bootstrap-steps", values["bootstrap-steps"], d.bootstrapSteps),
    resume: values.resume,
    head: values.head,
    name: values.name ?? d.name,
  };
}

function row(m: StepMetrics): string {
  const ev = m.eval_em !== undefined ? `  eval EM ${(m.eval_em * 100).toFixed(1)}%` : "";
  return `step ${String(m.step).padStart(3)}  reward ${m.reward_mean.toFixed(3)}  EM ${(m.em * 100).toFixed(1)}%  searches ${m.searches_per_sample.toFixed(2)}  kept ${m.groups_kept}  ${m.step_s.toFixed(1)} s${ev}`;
}

/** Runs `hearth train search-r1`; returns the exit code. */
export async function runTrainCommand(args: string[]): Promise<number> {
  const [workload, ...rest] = args;
  if (workload !== "search-r1") throw new HearthError(`unknown workload '${workload ?? ""}'\n${TRAIN_USAGE}`);
  const opts = parseTrainFlags(rest);
  const t0 = performance.now();
  const run = await SearchR1Run.create(opts);
  try {
    const first = await run.evaluate();
    opts.log(`held-out EM before RL: ${(first.em * 100).toFixed(1)}% (${opts.evalSize} questions, greedy), searches/sample ${first.searchesPerSample.toFixed(2)}`);
    const startEval = { step: run.stepsDone, em: first.em, searches: first.searchesPerSample };
    await run.train(opts.steps, { progress: false, onStep: (r) => opts.log(row(r.metrics)) });
    const last = run.history.at(-1);
    let final = last?.eval_em !== undefined && last.step === run.stepsDone ? { em: last.eval_em, searches: last.eval_searches ?? 0 } : undefined;
    if (!final) {
      const ev = await run.evaluate();
      final = { em: ev.em, searches: ev.searchesPerSample };
    }
    const dir = await run.saveCheckpoint();
    const report = writeReport(opts.out, run.history, { start: startEval, final: { step: run.stepsDone, ...final }, seconds: (performance.now() - t0) / 1000, options: { ...opts, log: undefined } });
    console.log(`\n${report.summary}\n`);
    console.log(`metrics: ${opts.out}/metrics.jsonl   report: ${report.file}   checkpoint: ${dir}`);
    return 0;
  } finally {
    // A command-line run is over: release its executors (a notebook keeps them warm instead).
    await run.close().catch(() => undefined);
  }
}
