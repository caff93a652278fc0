/**
 * Search-R1 on hearth: a policy that learns when to search, what to ask, and
 * when it knows enough to answer, trained with GRPO on warm executors.
 *
 * @example
 * ```ts
 * import { SearchR1Run, f1Reward, metricsView, plot } from "hearth/searchr1";
 *
 * const run = await SearchR1Run.create({ model: "tiny", data: "synthetic", rollouts: 2, trainers: 2 });
 * const r = await run.step();                 // one GRPO step: rollouts, rewards, update, weight sync
 * r;                                          // in a notebook: a card (reward, EM, time by phase, sync, KL, gap; all metrics a click away)
 * console.log(r.metrics.reward_mean, r.metrics.searches_per_sample);
 * metricsView(r.metrics);                     // every metric as a table
 * run.trajectories();                         // in a notebook: the step's trajectories as a table
 * run.trajectory(0);                          // prompt, generated and retrieved spans told apart
 * run.rescore(r.metrics.step, f1Reward);      // rewards and advantages recomputed on the stored samples
 * run.setReward(f1Reward);                    // the next step scores with F1; executors stay warm
 * await run.train(20);                        // progress bar; stops between steps on interrupt
 * plot.curve(run.history, "reward");
 * console.log((await run.evaluate()).em);     // greedy exact match on held-out questions
 * await run.disconnect();
 * ```
 */
export { SearchR1Run, DEFAULTS, type SearchR1Options, type StepMetrics, type StepResult, type EvalResult } from "../../rl/run/run.js";
export { BASE_OPTIONS, layerOptions, validateOptions, type RecipeDefaults, type ServiceSource } from "../../rl/run/options.js";
export { RolloutsAhead, lagOf, lagStats, type LagStats, type LaunchRollouts } from "../../rl/run/overlap.js";
export { recipeFor, RECIPES, syntheticRecipe, chainRecipe, hfChatRecipe, SYNTHETIC_TEXT, CHAT_TEXT, PROTOCOL_WORDS, checkChatModelFolder } from "./recipes/index.js";
export { chainTask, CHAIN_TEMPLATES, type ChainTask, type ChainQuestion, type ChainKind } from "./tasks/chain-task.js";
export type { TaskRecipe, PreparedTask, ModelShape, WarmStartContext } from "../../rl/run/recipe.js";
export { StepStore, KEPT_STEPS, trainLoop, regroup, type TrainOptions } from "../../rl/run/interactive.js";
export { warmupProgress, terminalProgress, type RunEvent, type RunEventHandler } from "../../rl/run/events.js";
export { SummaryView, StepCard, metricsView, stepSummary, stepPhases, withStepDisplay, type StepPhases } from "../../rl/report/step-summary.js";
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
} from "../../rl/notebook/index.js";
export { followRun, type RunClientOptions } from "../../rl/cluster/detached.js";
export type { LoopStatus, LoopEvent, LoopState } from "../../rl/state/run-log.js";
export { runTrainCommand, parseTrainFlags, TRAIN_USAGE } from "../../rl/cli/train-cli.js";
export { emReward, f1Reward, substringReward, normalizeAnswer, extractAnswer, exactMatch, f1, substringMatch, type RewardFn } from "./reward.js";
export { groupAdvantages, flattenGroups, type GroupAdvantages } from "../../rl/scoring/advantages.js";
export { Bm25Index, type Bm25Options, type Bm25Hit, type Bm25Passage } from "./retrieval/bm25.js";
export { syntheticTask, type SyntheticTask, type Question, type Passage, type QuestionKind } from "./tasks/synthetic.js";
export { buildPrompt, runEpisodes, parseSearch, formatInformation, informationBlock, insertion, STOP_STRINGS, type ProtocolText, type Episode, type ProtocolOptions, type EpisodeEngine } from "./protocol.js";
export { loadTokenizer, tokenizerFromFiles, tokenizerFromJson, readTokenizerFiles, wordTokenizerJson, TOKENIZER_FILES, type TextTokenizer, type TokenizerFiles } from "../../rl/text/tokenizer.js";
export { ChatPrompt, renderBounded, TEMPLATE_TIMEOUT_MS } from "../../rl/text/chat-template.js";
export { scoreSamples, buildSlices, type ScoredSample } from "../../rl/scoring/batch.js";
export { demonstrations, DEFAULT_MIX, type DemoMix } from "./demonstrations.js";
export { SearchR1Rollout, type Trajectory, type RolloutResult } from "../../rl/services/rollout-service.js";
export { SearchR1Trainer, type TrainSlice, type TrainResult } from "../../rl/services/trainer-service.js";
