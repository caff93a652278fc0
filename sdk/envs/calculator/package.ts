/**
 * The calculator as an environment package (`--env calculator`, `hearth
 * train calculator`): its recipe on the tiny preset.
 */
import { fileURLToPath } from "node:url";
import { HearthError } from "../../errors/index.js";
import type { EnvironmentPackage } from "../../rl/run/recipe.js";
import { calcRecipe } from "./recipe.js";

export const calculator: EnvironmentPackage = {
  name: "calculator",
  module: { module: fileURLToPath(import.meta.url), export: "calculator" },
  recipeFor(model: string, data: string) {
    if (!calcRecipe.matches(model, data)) throw new HearthError(`--model ${model}: the calculator environment trains the tiny preset (--model tiny); a model folder's tokenizer would need the recipe's protocol in its words`);
    return calcRecipe;
  },
};
