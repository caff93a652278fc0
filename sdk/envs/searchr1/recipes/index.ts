/**
 * The task recipes hearth ships, and the choice between them: for the tiny
 * preset the chain task (the default, from its shipped policy) or the easy
 * synthetic task (`--data synthetic-easy`, for fast tests); the chat recipe
 * for a model folder.
 */
import type { TaskRecipe } from "../../../rl/run/recipe.js";
import { chainRecipe } from "./chain.js";
import { hfChatRecipe } from "./hf-chat.js";
import { syntheticRecipe } from "./synthetic.js";

/** The shipped recipes, in the order `recipeFor` asks them. */
export const RECIPES: readonly TaskRecipe[] = [syntheticRecipe, chainRecipe, hfChatRecipe];

/** The recipe that serves `model` on `data` (default the synthetic chain task). */
export function recipeFor(model: string, data = "synthetic"): TaskRecipe {
  return RECIPES.find((r) => r.matches(model, data)) ?? hfChatRecipe;
}

export { syntheticRecipe, SYNTHETIC_TEXT, PROTOCOL_WORDS } from "./synthetic.js";
export { chainRecipe, chainPlan, prepareChain, shippedPolicy, CHAIN_RECIPE, REGENERATE } from "./chain.js";
export { hfChatRecipe, CHAT_TEXT, checkChatModelFolder } from "./hf-chat.js";
