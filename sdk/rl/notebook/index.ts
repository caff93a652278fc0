/**
 * Search-R1 in notebooks: trajectory tables and span views, rescoring, and
 * plots. Loading this module also gives AgentRun its notebook methods
 * (`trajectories`, `trajectory`, `rescore`).
 *
 * @example
 * ```ts
 * import { AgentRun, plot } from "hearth/searchr1";
 * const run = await AgentRun.create();
 * await run.step();
 * run.trajectories();             // a table
 * plot.curve(run.history, "reward");
 * ```
 */
import "./run-views.js";

export { TrajectoryView, RescoreView, trajectoryRows, trajectoryTable, trajectorySpans, rescoreSamples, type TrajectoryRow, type Span, type SpanKind, type SpanDecoder } from "./views.js";
export { plot, type CurveMetric, type StepSamples } from "./plots.js";
export { AttachedRun, STOP_WAIT_MS, type FollowOptions } from "./attached.js";
