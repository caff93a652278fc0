/**
 * The calculator's recipe on the tiny preset: the word problems of task.ts
 * (one, two or three chained operations), a word-level vocabulary that holds
 * every number up to 9,999 as one token, a 4-layer 64-wide policy with
 * frozen random embeddings (copying a number learned on some numbers then
 * works on all), and a warm start that teaches the protocol and the first
 * operation only: after a call whose result is not yet the answer, a
 * demonstration goes on to the next operation rarely (CALC_EXPLORE) and
 * otherwise answers that result, which is wrong. RL has to discover that
 * "are sold" and "is shared by" need another call.
 */
import path from "node:path";
import { demosDigest, jsonDigest, policiesDir, shippedRecipe, supervisedPlan, type ShippedPolicy, type WarmStartPlan } from "../../rl/run/warm-start.js";
import type { RecipeDefaults, RunOptions } from "../../rl/run/options.js";
import type { PreparedTask, TaskRecipe } from "../../rl/run/recipe.js";
import { tokenizerFromJson, wordTokenizerJson, type TextTokenizer } from "../../rl/text/tokenizer.js";
import { rng } from "../../rl/random.js";
import type { Demo, TaskItem } from "../../rl/types.js";
import { HearthError } from "../../errors/index.js";
import { CALC_TAGS, CALC_TEXT, calcPrompt, calculate, resultBlock } from "./environment.js";
import { CALLS_OF, calcTask, type CalcQuestion, type CalcTask } from "./task.js";
import { CALCULATOR_ENVIRONMENT, calcReward, answerOf } from "./reward.js";

/** The recipe's name (and its warm start's). */
export const CALC_RECIPE = "tiny-calc";

/** The command that (re)makes the shipped policy (said in errors). */
export const REGENERATE = "npm run warmstart -- --env calculator";

/** The shipped starting policy's folder. */
export function calcPolicyDir(): string {
  return path.join(policiesDir(), CALC_RECIPE);
}

/** The task is fixed (the vocabulary and so the warm start depend on it); --seed varies the run. */
const WORLD = { seed: 1, perWeight: 400, heldOut: 200 };

/** Probability that a demonstration goes on to the next operation after its first and its second call (else it answers the result it has). */
export const CALC_EXPLORE: readonly number[] = [0.3, 0.6];

const LAYERS = 4;

/** Option defaults: the generic ones plus the warm start's, and the step count. */
const DEFAULTS: RecipeDefaults = { steps: 40, bootstrapSteps: 1200, bootstrapBatch: 32, bootstrapLr: 3e-3, threads: 1, evalSize: 200, maxTurnTokens: 24, maxResponseTokens: 96 };

/** Expressions the parser refuses, one per reason: their messages' words go in the vocabulary, so the policy reads why. */
const REFUSED = ["7 / 0", "7 / 2", "(1 + 2", "1 +", "1 )", "1 2", "1 $ 2", `${"(".repeat(12)}1${")".repeat(12)}`, "1".repeat(12), "9".repeat(9) + " * " + "9".repeat(9), "1 + ".repeat(60) + "1"];

/** Every word the protocol and the tool write (split as the tokenizer's pre-tokenizer splits: runs of letters and digits, runs of punctuation). */
const PROTOCOL_WORDS: string[] = [
  ...new Set([...Object.values(CALC_TEXT), ...REFUSED.map((e) => calculate(e).text)].flatMap((t) => t.match(/[\p{L}\p{N}_]+|[^\p{L}\p{N}_\s]+/gu) ?? []).filter((w) => !w.startsWith("<"))),
];

/** A calculator task as its recipe prepares it. */
export interface CalcPreparedTask extends PreparedTask<TaskItem> {
  extra: CalcTask;
}

/** The category of a question in evaluation breakdowns. */
export const callsCategory = (n: number): string => `${n} call${n === 1 ? "" : "s"}`;

function itemOf(q: CalcQuestion): TaskItem {
  return { id: q.id, question: q.question, golds: q.golds, category: callsCategory(CALLS_OF[q.kind]) };
}

/** Demonstrations of the protocol and of first operations (see the header). */
export function calcDemonstrations(questions: readonly CalcQuestion[], tokenizer: TextTokenizer, n: number, seed: number, explore: readonly number[] = CALC_EXPLORE): Demo[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const q = questions[Math.floor(r() * questions.length)]!;
    const p = calcPrompt(q.question);
    const tokens = tokenizer.encode(tokenizer.chat(p.system, p.user));
    const mask = tokens.map(() => 0);
    const add = (text: string, train: boolean): void => {
      const ids = tokenizer.encode(text);
      tokens.push(...ids);
      mask.push(...ids.map(() => (train ? 1 : 0)));
    };
    let k = 0;
    for (;;) {
      const c = q.calls[k]!;
      add(` <calc> ${c.expression} </calc> `, true);
      add(resultBlock(String(c.result)), false);
      if (k + 1 < q.calls.length && r() < (explore[k] ?? 0)) k++;
      else break;
    }
    add(` <answer> ${q.calls[k]!.result} </answer> `, true);
    return { tokens, mask };
  });
}

/** The warm start of `task` with options `o`. */
export function calcPlan(task: CalcPreparedTask, o: Pick<RunOptions, "bootstrapSteps" | "bootstrapBatch" | "bootstrapLr">): WarmStartPlan {
  const seed = 1;
  const phases: WarmStartPlan["phases"] = [{ steps: o.bootstrapSteps, demos: (step, n) => calcDemonstrations(task.extra.train, task.tokenizer, n, seed * 1_000_003 + step) }];
  return supervisedPlan(
    CALC_RECIPE,
    {
      v: 1,
      world: WORLD,
      protocol: jsonDigest(CALC_TEXT),
      task: jsonDigest(task.extra.train.map((q) => [q.question, q.calls])),
      demos: demosDigest(phases, o.bootstrapBatch),
      model: task.model,
      trainer: task.trainer ?? {},
      explore: CALC_EXPLORE,
    },
    phases,
    o,
    seed,
  );
}

/** Prepares the calculator task. */
export function prepareCalc(o: Pick<RunOptions, "data" | "evalSize">): CalcPreparedTask {
  if (o.data !== "synthetic") throw new HearthError(`--data ${o.data}: the calculator's task is generated (--data synthetic, the default)`);
  if (o.evalSize > WORLD.heldOut) throw new HearthError(`--eval-size ${o.evalSize}: the calculator task holds out ${WORLD.heldOut} questions; ask for at most that many`);
  const task = calcTask(WORLD);
  const tokenizer = tokenizerFromJson(wordTokenizerJson([...task.words, ...PROTOCOL_WORDS], CALC_TAGS));
  return {
    recipe: CALC_RECIPE,
    train: task.train.map(itemOf),
    heldOut: task.heldOut.slice(0, o.evalSize).map(itemOf),
    tokenizer,
    environment: { title: "Calculator", spec: CALCULATOR_ENVIRONMENT, data: {}, words: { call: "calculation", calls: "calls", observation: "result" }, reward: calcReward, exactMatch: calcReward, answerOf, items: "problems" },
    model: { config: "tiny-synthetic", overrides: { vocab_size: tokenizer.size, num_hidden_layers: LAYERS } },
    trainer: { freezeEmbeddings: true, embeddingRms: 0.5 },
    describe: `calculator task: ${task.train.length} training problems needing 1–3 chained operations, ${Math.min(o.evalSize, task.heldOut.length)} held-out`,
    notes: [],
    extra: task,
  };
}

/** The calculator's shipped policy (`hearth warmstart --env calculator`). */
export const CALC_POLICY: ShippedPolicy<CalcPreparedTask> = { defaults: DEFAULTS, prepare: prepareCalc, plan: calcPlan, dir: calcPolicyDir };

/** The calculator on the tiny preset, from its shipped policy (policies/tiny-calc). */
export const calcRecipe: TaskRecipe<CalcPreparedTask> = shippedRecipe({
  name: CALC_RECIPE,
  defaults: DEFAULTS,
  matches: (model) => model === "tiny",
  policy: CALC_POLICY,
  regenerate: REGENERATE,
  warmstart: "hearth warmstart --env calculator",
});
