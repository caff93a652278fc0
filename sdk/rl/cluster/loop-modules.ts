/**
 * The modules a run's loop imports where it runs: the environment package a
 * detached run is of, and a reward swapped in by module (a function cannot
 * travel; a module can).
 */
import os from "node:os";
import path from "node:path";
import { HearthError } from "../../errors/index.js";
import { importServiceModule } from "../../runtime/import-module.js";
import type { ServiceSource } from "../run/options.js";
import type { EnvironmentPackage } from "../run/recipe.js";
import type { RewardFn } from "../types.js";

/** Where an environment package is: the module a run's loop imports, and its export (an EnvironmentPackage). */
export type PackageRef = EnvironmentPackage["module"];

/** Imports the environment package `ref` names, where the loop runs (a clear error when it is not one). */
export async function loadPackage(ref: PackageRef): Promise<EnvironmentPackage> {
  if (typeof ref?.module !== "string" || typeof ref.export !== "string") throw new HearthError("a detached run needs its environment package as { module: FILE, export: NAME }");
  let mod: Record<string, unknown>;
  try {
    mod = await importServiceModule(ref.module);
  } catch (err) {
    throw new HearthError(`environment package ${ref.module} cannot be loaded where the run's loop runs (${os.hostname()}): ${(err as Error).message}`);
  }
  const pkg = mod[ref.export] as EnvironmentPackage | undefined;
  if (typeof pkg?.recipeFor !== "function" || typeof pkg.name !== "string") throw new HearthError(`${ref.module} has no export '${ref.export}' that is an environment package ({ name, module, recipeFor })`);
  return pkg;
}

/** Loads a reward function from an ES module and checks it returns a number (fresh each time: an edited file is read again). */
export async function loadReward(ref: ServiceSource): Promise<RewardFn> {
  if (typeof ref?.module !== "string" || typeof ref.export !== "string") throw new HearthError("setReward needs { module: FILE, export: NAME }: a function cannot travel to the loop, a module can");
  let mod: Record<string, unknown>;
  try {
    mod = await importServiceModule(path.resolve(ref.module), { fresh: true });
  } catch (err) {
    throw new HearthError(`reward module ${ref.module} cannot be loaded where the run's loop runs (${os.hostname()}): ${(err as Error).message}`);
  }
  const fn = mod[ref.export];
  if (typeof fn !== "function") throw new HearthError(`reward module ${ref.module} has no exported function '${ref.export}' (exports: ${Object.keys(mod).join(", ") || "none"})`);
  const probe = (fn as RewardFn)("<answer>paris</answer>", ["Paris"]);
  if (typeof probe !== "number" || !Number.isFinite(probe)) throw new HearthError(`reward ${ref.module}#${ref.export} must return a finite number for (response, golds); it returned ${String(probe)}`);
  return fn as RewardFn;
}
