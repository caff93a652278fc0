/**
 * The agent tasks as environment packages (`hearth train agent-calculator`,
 * `hearth train agent-chain`, `npm run demo -- --env agent-calculator`):
 * their recipes on the tiny preset, trained on the environment path, the
 * peer the agent endpoint is compared with.
 */
import { fileURLToPath } from "node:url";
import { HearthError } from "../../errors/index.js";
import type { EnvironmentPackage } from "../../rl/run/recipe.js";
import { agentCalcRecipe } from "./recipes/calculator.js";
import { agentChainRecipe } from "./recipes/chain.js";

/** The tiny recipes serve `--model tiny` only: a model folder's tokenizer has other ids for the same text. */
function tinyOnly(name: string, recipe: typeof agentCalcRecipe): EnvironmentPackage["recipeFor"] {
  return (model, data) => {
    if (!recipe.matches(model, data)) throw new HearthError(`--model ${model}: the ${name} environment trains the tiny preset (--model tiny), whose shipped policy and tokenizer speak the Qwen2.5 tool-call format`);
    return recipe;
  };
}

/** The calculator as an agent task with the `calc` tool. */
export const agentCalculator: EnvironmentPackage = {
  name: "agent-calculator",
  module: { module: fileURLToPath(import.meta.url), export: "agentCalculator" },
  recipeFor: tinyOnly("agent-calculator", agentCalcRecipe),
};

/** The chain task as an agent task with the `search` tool. */
export const agentChain: EnvironmentPackage = {
  name: "agent-chain",
  module: { module: fileURLToPath(import.meta.url), export: "agentChain" },
  recipeFor: tinyOnly("agent-chain", agentChainRecipe),
};
