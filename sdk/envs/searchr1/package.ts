/**
 * Search-R1 as an environment package: its name, where it is (a detached
 * run's loop imports it from there) and its recipes (the tiny chain task,
 * the easy synthetic task, the chat recipe for a model folder).
 */
import { fileURLToPath } from "node:url";
import type { EnvironmentPackage } from "../../rl/run/recipe.js";
import { recipeFor } from "./recipes/index.js";

/** The Search-R1 environment package (`--env searchr1`, `hearth train search-r1`). */
export const searchR1: EnvironmentPackage = {
  name: "searchr1",
  module: { module: fileURLToPath(import.meta.url), export: "searchR1" },
  recipeFor,
};
