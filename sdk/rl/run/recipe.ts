/**
 * Task recipes. The Search-R1 loop is generic; what belongs to one task (its
 * data, the words its protocol writes, its model shape, its warm start and
 * its option defaults) lives in that task's recipe, which the run receives.
 * Generic code never asks which recipe it runs.
 */
import type { App } from "../../runtime/app.js";
import type { GangHandle } from "../../runtime/handles.js";
import type { RecipeDefaults, SearchR1Options } from "./options.js";
import type { ProtocolText } from "../../envs/searchr1/protocol.js";
import type { Passage, Question } from "../../envs/searchr1/tasks/synthetic.js";
import type { TextTokenizer } from "../text/tokenizer.js";
import type { SearchR1Trainer } from "../services/trainer-service.js";

/** The policy's shape for the engine: a preset name or an HF config dict, plus overrides. */
export interface ModelShape {
  config: string | Record<string, unknown>;
  overrides?: Record<string, unknown>;
}

/** A prepared task: what a run trains and evaluates on. */
export interface PreparedTask {
  /** The recipe's name. */
  recipe: string;
  train: Question[];
  heldOut: Question[];
  corpus: Passage[];
  tokenizer: TextTokenizer;
  /** The words the protocol writes. */
  text: ProtocolText;
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
export interface WarmStartContext {
  app: App;
  trainer: GangHandle<SearchR1Trainer>;
  task: PreparedTask;
  opts: SearchR1Options;
}

/** A task recipe. */
export interface TaskRecipe {
  readonly name: string;
  /** Does this recipe serve `model` (a preset name or a folder) on `data`? */
  matches(model: string, data: string): boolean;
  /** Option defaults of runs of this recipe. */
  readonly defaults: RecipeDefaults;
  /** Loads data, tokenizer and model shape; errors name the bad file or flag. */
  prepare(o: SearchR1Options): Promise<PreparedTask>;
  /** A warm start before RL: a local HF folder to start the trainers from, or undefined for none. */
  warmStart?(ctx: WarmStartContext): Promise<string | undefined>;
}

