/**
 * The notebook surface of a run: `run.trajectories()`, `run.trajectory(i)`
 * and `run.rescore(step, fn)`, attached to AgentRun when this module is
 * loaded (`hearth/searchr1` loads it). The CLI's training path imports run.ts
 * alone, so it loads no table or plotting library.
 */
import type { DataTable } from "../../notebook/index.js";
import { HearthError } from "../../errors/index.js";
import type { RewardFn } from "../types.js";
import { AgentRun } from "../run/run.js";
import { RescoreView, TrajectoryView, rescoreSamples, trajectoryTable } from "./views.js";

declare module "../run/run.js" {
  interface AgentRun {
    /** A step's trajectories as a table (question, golds, response, searches, answer, reward, advantage, kept, tokens, masked). */
    trajectories(step?: number): DataTable;
    /** Trajectory `i` of a step, its prompt, generated and retrieved spans told apart. */
    trajectory(i: number, step?: number): TrajectoryView;
    /** Recomputes a held step's rewards and advantages with `fn` (the stored samples are replaced; the step's update is not redone). */
    rescore(step: number, fn: RewardFn): RescoreView;
  }
}

AgentRun.prototype.trajectories = function (this: AgentRun, step?: number): DataTable {
  const r = this.results.get(step);
  return trajectoryTable(r.samples, { step: r.metrics.step, words: this.task.environment.words });
};

AgentRun.prototype.trajectory = function (this: AgentRun, i: number, step?: number): TrajectoryView {
  const r = this.results.get(step);
  const s = r.samples[i];
  if (!Number.isInteger(i) || !s) throw new HearthError(`trajectory ${String(i)}: step ${r.metrics.step} has trajectories 0–${r.samples.length - 1}`);
  return new TrajectoryView(s, this.task.tokenizer, i, r.metrics.step, this.task.environment.words);
};

AgentRun.prototype.rescore = function (this: AgentRun, step: number, fn: RewardFn): RescoreView {
  const view = rescoreSamples(step, this.results.get(step).samples, fn, this.opts.groupSize);
  this.results.replaceSamples(step, [...view.after]);
  return view;
};
