/**
 * SearchR1Run: the generic AgentRun created with the Search-R1 package, as
 * notebooks and scripts have used it (`SearchR1Run.create(options)`,
 * `SearchR1Run.attach(name)`), and the embedded default's options.
 */
import type { RunClientOptions } from "../../rl/cluster/detached.js";
import { AttachedRun } from "../../rl/notebook/index.js";
import { layerOptions, type RunOptions } from "../../rl/run/options.js";
import { AgentRun } from "../../rl/run/run.js";
import { searchR1 } from "./package.js";
import { recipeFor } from "./recipes/index.js";

/** A Search-R1 run: an AgentRun of the searchr1 package. */
export type SearchR1Run = AgentRun;

/** Creates (`create`) or attaches to (`attach`) Search-R1 runs. */
export const SearchR1Run = {
  /** Opens a Search-R1 run (see AgentRun.create): options layered over the recipe's, services started, the first weights published. */
  create: (partial: Partial<RunOptions> = {}): Promise<AgentRun> => AgentRun.create(partial, searchR1),
  /** Attaches to a detached run by name (its loop goes on; see AttachedRun). */
  attach: (name: string, opts: RunClientOptions = {}): Promise<AttachedRun> => AttachedRun.open(name, opts),
} as const;

/** The options of the embedded default's run (the tiny model on the synthetic chain task). */
export const DEFAULTS: RunOptions = layerOptions(recipeFor("tiny", "synthetic").defaults, {});
