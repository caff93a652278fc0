/**
 * Search-R1 on hearth (`hearth/searchr1`): a policy that learns when to
 * search, what to ask, and when it knows enough to answer, trained with GRPO
 * on warm executors. Search-R1 is an environment of the generic RL layer
 * (`hearth/rl`, re-exported here): its environment class (BM25 search over
 * a corpus, warm on each rollout executor), its tasks, recipes, rewards and
 * demonstrations, and `SearchR1Run`, an AgentRun of its package.
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
export * from "../../rl/index.js";

// Search-R1's own.
export { SearchR1Run, DEFAULTS } from "./run.js";
export { searchR1 } from "./package.js";
export { SearchR1Environment, type SearchR1EnvData } from "./environment.js";
export { SEARCH_WORDS, SEARCH_R1_ENVIRONMENT, searchR1Environment, withSearchEnvironment, type SearchR1Task } from "./task.js";
export { recipeFor, RECIPES, syntheticRecipe, chainRecipe, hfChatRecipe, SYNTHETIC_TEXT, CHAT_TEXT, PROTOCOL_WORDS, checkChatModelFolder } from "./recipes/index.js";
export { chainTask, CHAIN_TEMPLATES, type ChainTask, type ChainQuestion, type ChainKind } from "./tasks/chain-task.js";
export { emReward, f1Reward, substringReward, normalizeAnswer, extractAnswer, exactMatch, f1, substringMatch } from "./reward.js";
export { Bm25Index, type Bm25Options, type Bm25Hit, type Bm25Passage } from "./retrieval/bm25.js";
export { syntheticTask, type SyntheticTask, type Question, type Passage, type QuestionKind } from "./tasks/synthetic.js";
export { buildPrompt, parseSearch, formatInformation, informationBlock, insertion, STOP_STRINGS, type ProtocolText, type Hit, type Retrieve } from "./protocol.js";
export { demonstrations, DEFAULT_MIX, type DemoMix } from "./demonstrations.js";
