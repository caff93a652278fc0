/**
 * hearth's RL layer for tool-using agents (`hearth/rl`): a run on warm
 * executors (AgentRun) for any environment, the environment interface, the
 * episode loop, GRPO scoring, the services, notebook views and the CLI's
 * commands. An environment package (Search-R1's in `hearth/searchr1`, the
 * calculator's in sdk/envs/calculator, or one of your own) supplies the
 * task, the tool and the reward; see docs/architecture.md.
 *
 * @example
 * ```ts
 * import { AgentRun } from "hearth/rl";
 * import { calculator } from "./my-env/package.js";
 * const run = await AgentRun.create({ steps: 20 }, calculator);
 * const items = run.itemsOf(run.stepsDone + 1);          // this step's task items
 * const batch = await run.rollout(items);                 // episodes on the warm rollouts
 * const scored = await run.score(batch, myReward);        // rewards, GRPO advantages
 * await run.trainOn(scored.samples);                      // one update on every trainer
 * await run.publish();                                    // new weights to the rollouts
 * ```
 */
import "./notebook/index.js";

export { AgentRun, type Rollouts, type RolloutOptions, type RunOptions, type StepMetrics, type StepResult, type EvalResult } from "./run/run.js";
export { BASE_OPTIONS, layerOptions, validateOptions, type RecipeDefaults, type ServiceSource } from "./run/options.js";
export { RolloutsAhead, lagOf, lagStats, type LagStats, type LaunchRollouts } from "./run/overlap.js";
export type { TaskRecipe, PreparedTask, TaskEnvironment, EnvironmentPackage, ModelShape, WarmStartContext } from "./run/recipe.js";
export { loadEnvironment, type Environment, type EnvironmentContext, type EnvironmentSpec, type EnvStep, type EnvTurn } from "./environment.js";
export { runEpisodes, TOOL_TIMEOUT_MS, type EpisodeEngine, type EpisodeOptions, type EpisodeRow } from "./episodes.js";
export { OptionError, RunError, RewardError, EnvironmentError } from "./errors.js";
export { callsOf, callsWord, type TaskItem, type Demo, type RewardFn, type EnvWords, type EpisodeLimits, type Episode, type Trajectory, type ScoredSample, type Scored, type CategoryEval, type TrainSlice, type TrainResult } from "./types.js";
export { StepStore, KEPT_STEPS, trainLoop, regroup, type TrainOptions } from "./run/interactive.js";
export { warmupProgress, terminalProgress, type RunEvent, type RunEventHandler } from "./run/events.js";
export { SummaryView, StepCard, metricsView, stepSummary, stepPhases, withStepDisplay, type StepPhases } from "./report/step-summary.js";
export {
  TrajectoryView,
  RescoreView,
  trajectoryRows,
  trajectoryTable,
  trajectorySpans,
  rescoreSamples,
  plot,
  type TrajectoryRow,
  type Span,
  type SpanKind,
  type SpanDecoder,
  type CurveMetric,
  type StepSamples,
  AttachedRun,
  type FollowOptions,
} from "./notebook/index.js";
export { followRun, detachRun, type RunClientOptions } from "./cluster/detached.js";
export type { LoopStatus, LoopEvent, LoopState } from "./state/run-log.js";
export { runTrainCommand, parseTrainFlags, TRAIN_USAGE, stepRow, type Workloads } from "./cli/train-cli.js";
export { groupAdvantages, flattenGroups, type GroupAdvantages } from "./scoring/advantages.js";
export { scoreSamples, buildSlices } from "./scoring/batch.js";
export { loadTokenizer, tokenizerFromFiles, tokenizerFromJson, readTokenizerFiles, wordTokenizerJson, TOKENIZER_FILES, type TextTokenizer, type TokenizerFiles } from "./text/tokenizer.js";
export { ChatPrompt, renderBounded, TEMPLATE_TIMEOUT_MS } from "./text/chat-template.js";
export { RolloutService, type RolloutResult } from "./services/rollout-service.js";
export { TrainerService } from "./services/trainer-service.js";
export { rng, pick } from "./random.js";
