/**
 * The calculator task as an agent task (`agent-calculator`): the
 * calculator's word problems (sdk/envs/calculator/task.ts, one to three
 * chained operations) written as prose, the `calc` tool in the Qwen2.5
 * `<tool_call>` format, exact match on the number the agent answers. Its
 * starting policy (policies/tiny-agent-calc, `hearth warmstart --env
 * agent-calculator`) knows the format and the first call; after a call it
 * goes on to the next operation only as often as AGENT_CALC_EXPLORE says,
 * else answers the result it has: RL has to discover chaining, as on the
 * calculator (docs/calculator.md).
 */
import path from "node:path";
import { policiesDir, shippedRecipe, type ShippedPolicy, type WarmStartPlan } from "../../../rl/run/warm-start.js";
import type { RecipeDefaults, RunOptions } from "../../../rl/run/options.js";
import type { TaskRecipe } from "../../../rl/run/recipe.js";
import { HearthError } from "../../../errors/index.js";
import { callsCategory } from "../../calculator/recipe.js";
import { CALLS_OF, calcTask, type CalcQuestion } from "../../calculator/task.js";
import { AGENT_CALC_ENVIRONMENT, agentAnswer, agentCalcReward } from "../reward.js";
import { TOOL_VARIANTS, calcResult } from "../tools.js";
import { AGENT_TRAINER, agentModel, agentPlan, agentTokenizer, prose, type AgentPreparedTask, type AgentQuestion } from "./common.js";

/** The recipe's name (and its shipped policy's folder). */
export const AGENT_CALC_RECIPE = "tiny-agent-calc";

/** The command that (re)makes the shipped policy (said in errors). */
export const AGENT_CALC_REGENERATE = "npm run warmstart -- --env agent-calculator";

/** The calculator's task (the same questions as `hearth train calculator`); --seed varies the run, not the task. */
const WORLD = { seed: 1, perWeight: 400, heldOut: 200 };

/**
 * Probability that a demonstration goes on to the next operation after its
 * first and its second call (else it answers the result it has). With
 * demonstrations drawn from DEMO_PER_WEIGHT's fresh questions, answers begun
 * with AGENT_CALC_ANSWER_LEAD and 2,400 warm-start steps, `[0.25, 0.9]`
 * starts at 17 % held-out EM (the one-call problems; greedy, it never calls
 * a second time) and RL reaches 98 % by step 10; `[0.15, 0.9]` starts at
 * 16.5 % and reaches 94.5 %. Without the lead, `[0.15, 0.9]` started at 25 %
 * and `[0.09, 0.9]` did not form the copy of a tool result into the next
 * call. docs/agents.md, docs/results.md.
 */
export const AGENT_CALC_EXPLORE: readonly number[] = [0.25, 0.9];

/**
 * Questions per kind weight the warm start's demonstrations are drawn from
 * (12,800: 76,800 questions, about one per demonstration). Drawn from the
 * 2,400 training questions instead, each is seen ~32 times and the policy
 * learns each one's chance draws of going on.
 */
const DEMO_PER_WEIGHT = 12_800;

/** System messages agents send, which demonstrations draw besides none (the environment path sends none). */
export const AGENT_CALC_SYSTEMS: readonly string[] = [
  "You are a helpful assistant.",
  "Use the calc tool for arithmetic. Answer with the number only.",
  "You are a careful math agent. Call calc for every operation, then reply with the final number.",
];

/** Expressions the parser refuses, one per reason: the words of its answers go in the vocabulary. */
const REFUSED = ["7 / 0", "7 / 2", "(1 + 2", "1 +", "1 )", "1 2", "1 $ 2", `${"(".repeat(12)}1${")".repeat(12)}`, "1".repeat(12), "9".repeat(9) + " * " + "9".repeat(9), "1 + ".repeat(60) + "1"];

const DEFAULTS: RecipeDefaults = { steps: 30, bootstrapSteps: 2400, bootstrapBatch: 32, bootstrapLr: 3e-3, threads: 1, evalSize: 200, maxTurnTokens: 32, maxResponseTokens: 96 };

/** The shipped policy's folder. */
export function agentCalcPolicyDir(): string {
  return path.join(policiesDir(), AGENT_CALC_RECIPE);
}

/**
 * What a demonstration's answer turn begins with before the number (a line
 * break, which exact match trims). The number is a copy of a tool result and
 * the copy is unsure on some held-out results; begun with the number, the
 * answer's first token carried that doubt into the choice between answering
 * and calling again, and the call's fixed first token won that choice on
 * problems the copy was unsure of (the start's greedy policy chained on 16
 * of 166 held-out multi-call problems at explore 0.15). Begun with a fixed
 * token, the choice is made before the copy.
 */
export const AGENT_CALC_ANSWER_LEAD = "\n";

/** A calculator question as an agent question: prose, and its solution path of `calc` calls. */
export function agentCalcQuestion(q: CalcQuestion): AgentQuestion {
  return {
    item: { id: q.id, question: prose(q.question), golds: q.golds, category: callsCategory(CALLS_OF[q.kind]) },
    path: q.calls.map((c) => ({ call: { name: "calc", arguments: { expression: c.expression } }, result: calcResult(c.expression), answer: AGENT_CALC_ANSWER_LEAD + String(c.result) })),
  };
}

/** Prepares the task (the run's and `hearth warmstart`'s). */
export function prepareAgentCalc(o: Pick<RunOptions, "data" | "evalSize">): AgentPreparedTask {
  if (o.data !== "synthetic") throw new HearthError(`--data ${o.data}: the calculator's task is generated (--data synthetic, the default)`);
  if (o.evalSize > WORLD.heldOut) throw new HearthError(`--eval-size ${o.evalSize}: the calculator task holds out ${WORLD.heldOut} problems; ask for at most that many`);
  const task = calcTask(WORLD);
  const train = task.train.map(agentCalcQuestion);
  // The same generator drawn on: its first questions are `train`, the rest are new (held-out factor pairs never
  // appear); the fingerprint's `task` digest of `train` covers the generator, its first demonstrations the rest.
  const demoPool = { material: { perWeight: DEMO_PER_WEIGHT }, questions: calcTask({ ...WORLD, perWeight: DEMO_PER_WEIGHT }).train.map(agentCalcQuestion) };
  const heldOut = task.heldOut.map(agentCalcQuestion);
  const variants = { systems: AGENT_CALC_SYSTEMS, tools: TOOL_VARIANTS.calc.map((t) => [t]) };
  const tokenizer = agentTokenizer([...train, ...heldOut], variants, REFUSED.map(calcResult));
  return {
    recipe: AGENT_CALC_RECIPE,
    train: train.map((q) => q.item),
    heldOut: heldOut.slice(0, o.evalSize).map((q) => q.item),
    tokenizer,
    environment: {
      title: "Calculator agent",
      spec: AGENT_CALC_ENVIRONMENT,
      data: {},
      words: { call: "tool call", calls: "calls", observation: "tool result" },
      reward: agentCalcReward,
      exactMatch: agentCalcReward,
      answerOf: agentAnswer,
      items: "problems",
    },
    model: agentModel(tokenizer),
    trainer: AGENT_TRAINER,
    describe: `calculator agent task: ${train.length} training problems needing 1–3 chained calc calls, ${Math.min(o.evalSize, heldOut.length)} held-out`,
    notes: [],
    extra: { train, variants, explore: AGENT_CALC_EXPLORE, world: WORLD, demoPool },
  };
}

/** The warm start of the task. */
export function agentCalcPlan(task: AgentPreparedTask, o: Pick<RunOptions, "bootstrapSteps" | "bootstrapBatch" | "bootstrapLr">): WarmStartPlan {
  return agentPlan(AGENT_CALC_RECIPE, task, o);
}

/** The shipped policy (`hearth warmstart --env agent-calculator`). */
export const AGENT_CALC_POLICY: ShippedPolicy<AgentPreparedTask> = { defaults: DEFAULTS, prepare: prepareAgentCalc, plan: agentCalcPlan, dir: agentCalcPolicyDir };

/** The calculator agent task on the tiny preset, from its shipped policy. */
export const agentCalcRecipe: TaskRecipe<AgentPreparedTask> = shippedRecipe({
  name: AGENT_CALC_RECIPE,
  defaults: DEFAULTS,
  matches: (model) => model === "tiny",
  policy: AGENT_CALC_POLICY,
  regenerate: AGENT_CALC_REGENERATE,
  warmstart: "hearth warmstart --env agent-calculator",
});
