/**
 * The chain task as an agent task (`agent-chain`): the Search-R1 chain
 * task's questions (sdk/envs/searchr1/tasks/chain-task.ts: one, two or three
 * chained searches over a fictional world; held-out questions are about
 * people no training question names) written as prose, the `search` tool in
 * the Qwen2.5 `<tool_call>` format over the same passages, exact match on
 * the name the agent answers. Its starting policy (policies/tiny-agent-chain,
 * `hearth warmstart --env agent-chain`) searches the question's name and
 * answers what the passage says; it searches the name it read only as often
 * as AGENT_CHAIN_EXPLORE says. A quarter of its demonstrations are
 * one-search questions about a city or a country, as on the chain task.
 */
import path from "node:path";
import { policiesDir, shippedRecipe, type ShippedPolicy, type WarmStartPlan } from "../../../rl/run/warm-start.js";
import type { RecipeDefaults, RunOptions } from "../../../rl/run/options.js";
import type { TaskRecipe } from "../../../rl/run/recipe.js";
import { HearthError } from "../../../errors/index.js";
import type { ChainQuestion } from "../../searchr1/tasks/chain-task.js";
import { AGENT_CHAIN_ENVIRONMENT, agentAnswer, agentChainReward } from "../reward.js";
import { CHAIN_WORLD, TOOL_VARIANTS, chainWorld, passageText, searchResult } from "../tools.js";
import { AGENT_TRAINER, agentModel, agentPlan, agentTokenizer, prose, type AgentPreparedTask, type AgentQuestion } from "./common.js";

/** The recipe's name (and its shipped policy's folder). */
export const AGENT_CHAIN_RECIPE = "tiny-agent-chain";

/** The command that (re)makes the shipped policy (said in errors). */
export const AGENT_CHAIN_REGENERATE = "npm run warmstart -- --env agent-chain";

/** Probability that a demonstration searches the name it just read after its first and its second search (else it answers that name). */
export const AGENT_CHAIN_EXPLORE: readonly number[] = [0.3, 0.6];

/** Share of demonstrations drawn from the one-search questions about a city or a country. */
const ENTITY_SHARE = 0.25;

/** System messages agents send, which demonstrations draw besides none (the environment path sends none). */
export const AGENT_CHAIN_SYSTEMS: readonly string[] = [
  "You are a helpful assistant.",
  "Use the search tool to look things up. Answer with the name only.",
  "You are a research agent. Search for each name you need, then reply with the answer alone.",
];

const DEFAULTS: RecipeDefaults = { steps: 40, bootstrapSteps: 1200, bootstrapBatch: 32, bootstrapLr: 3e-3, threads: 1, evalSize: 200, maxTurnTokens: 32, maxResponseTokens: 320 };

/** The shipped policy's folder. */
export function agentChainPolicyDir(): string {
  return path.join(policiesDir(), AGENT_CHAIN_RECIPE);
}

function questionOf(q: ChainQuestion): AgentQuestion {
  return {
    item: { id: q.id, question: prose(q.question), golds: q.golds, category: q.category },
    path: q.hops.map((h) => ({ call: { name: "search", arguments: { query: h.query } }, result: searchResult(h.query), answer: h.found })),
  };
}

/** Prepares the task (the run's and `hearth warmstart`'s). */
export function prepareAgentChain(o: Pick<RunOptions, "data" | "evalSize">): AgentPreparedTask {
  if (o.data !== "synthetic") throw new HearthError(`--data ${o.data}: the chain task is generated (--data synthetic, the default)`);
  if (o.evalSize > CHAIN_WORLD.heldOut) throw new HearthError(`--eval-size ${o.evalSize}: the chain task holds out ${CHAIN_WORLD.heldOut} questions; ask for at most that many`);
  const world = chainWorld().task;
  const train = world.train.map(questionOf);
  const heldOut = world.heldOut.map(questionOf);
  const entity = world.entityQuestions.map(questionOf);
  // Demonstrations draw entity questions ENTITY_SHARE of the time: repeated in the pool to that share.
  const copies = Math.max(1, Math.round((ENTITY_SHARE / (1 - ENTITY_SHARE)) * (train.length / entity.length)));
  const pool = [...train, ...Array.from({ length: copies }, () => entity).flat()];
  const variants = { systems: AGENT_CHAIN_SYSTEMS, tools: TOOL_VARIANTS.search.map((t) => [t]) };
  const tokenizer = agentTokenizer([...train, ...heldOut, ...entity], variants, [...world.corpus.map((p) => passageText(p.text)), "no results"]);
  return {
    recipe: AGENT_CHAIN_RECIPE,
    train: train.map((q) => q.item),
    heldOut: heldOut.slice(0, o.evalSize).map((q) => q.item),
    tokenizer,
    environment: {
      title: "Chain search agent",
      spec: AGENT_CHAIN_ENVIRONMENT,
      data: {},
      words: { call: "search", calls: "searches", observation: "retrieved passage" },
      reward: agentChainReward,
      exactMatch: agentChainReward,
      answerOf: agentAnswer,
      items: "questions",
    },
    model: agentModel(tokenizer),
    trainer: AGENT_TRAINER,
    describe: `chain agent task: ${train.length} training questions needing 1–3 chained searches, ${Math.min(o.evalSize, heldOut.length)} held-out, ${world.corpus.length} passages`,
    notes: [],
    extra: { train: pool, variants, explore: AGENT_CHAIN_EXPLORE, world: { ...CHAIN_WORLD, entityShare: ENTITY_SHARE } },
  };
}

/** The warm start of the task. */
export function agentChainPlan(task: AgentPreparedTask, o: Pick<RunOptions, "bootstrapSteps" | "bootstrapBatch" | "bootstrapLr">): WarmStartPlan {
  return agentPlan(AGENT_CHAIN_RECIPE, task, o);
}

/** The shipped policy (`hearth warmstart --env agent-chain`). */
export const AGENT_CHAIN_POLICY: ShippedPolicy<AgentPreparedTask> = { defaults: DEFAULTS, prepare: prepareAgentChain, plan: agentChainPlan, dir: agentChainPolicyDir };

/** The chain agent task on the tiny preset, from its shipped policy. */
export const agentChainRecipe: TaskRecipe<AgentPreparedTask> = shippedRecipe({
  name: AGENT_CHAIN_RECIPE,
  defaults: DEFAULTS,
  matches: (model) => model === "tiny",
  policy: AGENT_CHAIN_POLICY,
  regenerate: AGENT_CHAIN_REGENERATE,
  warmstart: "hearth warmstart --env agent-chain",
});
