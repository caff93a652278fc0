/**
 * Task recipes. The loop is generic; what belongs to one task (its data, its
 * environment and what it ships to it, its model shape, its warm start, its
 * rewards and its option defaults) lives in that task's recipe, which the run
 * receives. Generic code never asks which recipe (or environment) it runs.
 */
import type { App } from "../../runtime/app.js";
import type { GangHandle } from "../../runtime/handles.js";
import type { RecipeDefaults, RunOptions } from "./options.js";
import type { EnvironmentSpec } from "../environment.js";
import type { TextTokenizer } from "../text/tokenizer.js";
import type { TrainerService } from "../services/trainer-service.js";
import type { EnvWords, ModelShape, RewardFn, TaskItem } from "../types.js";

export type { ModelShape } from "../types.js";

/** A task's environment as its run needs it: where the rollout side's class is and what to ship it, and the driver side's words and scores. */
export interface TaskEnvironment {
  /** Its title in reports and logs ("Search-R1"). */
  title: string;
  /** The environment class rollout executors load (a module and its export). */
  spec: EnvironmentSpec;
  /** Its data for `init`, shipped as is (small: settings, protocol text). */
  data: Record<string, unknown>;
  /** Large values its `init` reads: each is put in the cache under the run's keys and handed over as `data[name]`, an ObjectRef. */
  objects?: Record<string, unknown>;
  /** How it names its tool calls in metrics, logs and views. */
  words: EnvWords;
  /** The reward a run starts with (`setReward` swaps it). */
  reward: RewardFn;
  /** What the `em` metrics count as right (the reward aside). */
  exactMatch: RewardFn;
  /** The answer a response gives, as views show it (null: none). */
  answerOf(response: string): string | null;
  /** Items evaluated: a word for them in logs ("questions", "problems"). */
  items?: string;
}

/** A prepared task: what a run trains and evaluates on. */
export interface PreparedTask<Item extends TaskItem = TaskItem> {
  /** The recipe's name. */
  recipe: string;
  train: Item[];
  heldOut: Item[];
  tokenizer: TextTokenizer;
  environment: TaskEnvironment;
  model: ModelShape;
  /** A Hugging Face folder the trainers start from, if any. */
  modelDir?: string;
  /** Trainer settings the task needs (e.g. frozen embeddings). */
  trainer?: { freezeEmbeddings?: boolean; embeddingRms?: number };
  /** A short description for logs and reports. */
  describe: string;
  /** Facts worth a log line before services start (e.g. which prompt fallback is used). */
  notes: string[];
  /** The recipe's own data for its warm start (opaque to the loop). */
  extra?: unknown;
}

/** What a warm start gets. */
export interface WarmStartContext<T extends PreparedTask = PreparedTask> {
  app: App;
  trainer: GangHandle<TrainerService>;
  task: T;
  opts: RunOptions;
}

/** A task recipe (`T`: the task it prepares, which its warm start gets back). */
export interface TaskRecipe<T extends PreparedTask = PreparedTask> {
  readonly name: string;
  /** Does this recipe serve `model` (a preset name or a folder) on `data`? */
  matches(model: string, data: string): boolean;
  /** Option defaults of runs of this recipe. */
  readonly defaults: RecipeDefaults;
  /** Loads data, tokenizer and model shape; errors name the bad file or flag. */
  prepare(o: RunOptions): Promise<T>;
  /** A warm start before RL: a local HF folder to start the trainers from, or undefined for none. */
  warmStart?(ctx: WarmStartContext<T>): Promise<string | undefined>;
}

/**
 * An environment's recipes, as a run picks one: a module exporting this
 * (`export const <name>: EnvironmentPackage`) is what travels when the run
 * does (a run's loop on the cluster imports it by `module`).
 */
export interface EnvironmentPackage {
  /** The environment's name (`--env NAME`). */
  readonly name: string;
  /** Where this package is: a module and its export (a detached run's loop imports it). */
  readonly module: { module: string; export: string };
  /** The recipe for `model` on `data`; an error naming both (and what it serves) when none matches. */
  recipeFor(model: string, data: string): TaskRecipe;
}

