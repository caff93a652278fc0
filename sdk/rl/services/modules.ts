/**
 * Where the layer's service classes are, as executors load them (a module
 * file and its export): the one place that names their files.
 */
import { fileURLToPath } from "node:url";
import type { ServiceSource } from "../run/options.js";

function here(file: string, exportName: string): ServiceSource {
  return { module: fileURLToPath(new URL(file, import.meta.url)), export: exportName };
}

/** The rollout pool's class. */
export const ROLLOUT_CLASS: ServiceSource = here("./rollout-service.js", "RolloutService");
/** The trainer gang's class. */
export const TRAINER_CLASS: ServiceSource = here("./trainer-service.js", "TrainerService");
/** A detached run's loop (cluster/loop-service.ts). */
export const LOOP_CLASS: ServiceSource = here("../cluster/loop-service.js", "RunLoopService");
