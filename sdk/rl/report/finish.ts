/**
 * The end of a training session, shared by the CLI (cli.ts) and a run's loop
 * on the cluster (loop-service.ts): the final held-out evaluation (unless the
 * last step just made one), the standalone checkpoint, and the HTML report
 * with its summary.
 */
import { emByCategory } from "../run/pipeline.js";
import { pickSample, writeReport, type EvalPoint } from "./report.js";
import type { WarmStartTime } from "../run/events.js";
import type { AgentRun } from "../run/run.js";
import { callsOf } from "../types.js";

/** What the session measured before its steps. */
export interface SessionStart {
  t0: number;
  startEval: EvalPoint;
  setupSeconds: number;
  /** History entries before this session's steps. */
  before: number;
  warmStart?: WarmStartTime;
}

/** Evaluates (if needed), writes the checkpoint (unless --no-checkpoint) and the report; returns what it wrote. */
export async function finishSession(run: AgentRun, s: SessionStart): Promise<{ summary: string; report: string; checkpoint: string; finalEm: number }> {
  const opts = run.opts;
  const last = run.history.at(-1);
  const words = run.task.environment.words;
  let final = last?.eval_em !== undefined && last.step === run.stepsDone ? { em: last.eval_em, calls: callsOf(last, words.calls).eval ?? 0, emBy: last.eval_em_by } : undefined;
  if (!final) {
    const ev = await run.evaluate();
    final = { em: ev.em, calls: ev.callsPerSample, emBy: emByCategory(ev) };
  }
  const checkpoint = opts.checkpoint ? await run.saveCheckpoint() : "(not written: --no-checkpoint)";
  const latest = run.results.steps().length > 0 ? run.result() : undefined;
  const sample = latest && pickSample(latest.samples);
  const report = writeReport(opts.out, run.history, {
    env: { title: run.task.environment.title, words },
    start: s.startEval,
    final: { step: run.stepsDone, ...final },
    seconds: (performance.now() - s.t0) / 1000,
    setupSeconds: s.setupSeconds,
    rlSeconds: run.history.slice(s.before).reduce((n, m) => n + m.step_s, 0),
    warmStart: s.warmStart,
    startedFrom: run.task.modelDir,
    options: { ...opts, log: undefined, connectOptions: undefined },
    trajectory: latest && sample ? { step: latest.metrics.step, sample, decoder: run.task.tokenizer } : undefined,
  });
  return { summary: report.summary, report: report.file, checkpoint, finalEm: final.em };
}
