/**
 * The task recipes hearth ships, and the choice between them: the synthetic
 * task's for the tiny preset, the chat recipe for a model folder.
 */
import type { TaskRecipe } from "../recipe.js";
import { hfChatRecipe } from "./hf-chat.js";
import { syntheticRecipe } from "./synthetic.js";

/** The shipped recipes, in the order `recipeFor` asks them. */
export const RECIPES: readonly TaskRecipe[] = [syntheticRecipe, hfChatRecipe];

/** The recipe that serves `model`. */
export function recipeFor(model: string): TaskRecipe {
  return RECIPES.find((r) => r.matches(model)) ?? hfChatRecipe;
}

export { syntheticRecipe, SYNTHETIC_TEXT, PROTOCOL_WORDS } from "./synthetic.js";
export { hfChatRecipe, CHAT_TEXT, checkChatModelFolder } from "./hf-chat.js";
