/**
 * The recipe for a Hugging Face chat model (a folder with config.json,
 * safetensors weights, tokenizer.json and, usually, a chat template) on
 * HotpotQA or the synthetic task: a Search-R1 style instruction in plain
 * English, passages formatted as numbered documents, and the reference
 * system's training recipe as defaults (docs/searchr1.md lists them).
 */
import path from "node:path";
import { checkModelFolder } from "../../../tensor/model-check.js";
import { HearthError } from "../../../errors/index.js";
import { loadHotpotQa } from "../tasks/hotpotqa.js";
import type { RecipeDefaults, RunOptions } from "../../../rl/run/options.js";
import type { ProtocolText } from "../protocol.js";
import type { TaskRecipe } from "../../../rl/run/recipe.js";
import { withSearchEnvironment, type SearchR1Task } from "../task.js";
import { syntheticTask } from "../tasks/synthetic.js";
import { loadTokenizer } from "../../../rl/text/tokenizer.js";

/** The protocol in prose, for models that read natural language. */
export const CHAT_TEXT: ProtocolText = {
  instruction:
    "Answer the question below. Reason step by step inside <think> and </think> whenever you receive new information. " +
    "If a fact is missing, search for it by writing a query inside <search> and </search>; the best matching passages " +
    "come back inside <information> and </information>. You may search several times. When you know the answer, write " +
    "only the answer inside <answer> and </answer>, for example <answer> Paris </answer>.",
  question: "Question: {question}",
  passage: "Doc {i} (Title: {title}) {text}",
  passageSeparator: "\n",
  informationOpen: "<information>",
  informationClose: "</information>",
  insertBefore: "\n\n",
  insertAfter: "\n\n",
  invalid: "Invalid action: write a query inside <search> and </search>, or the answer inside <answer> and </answer>.",
  limit: "No more searches are allowed: give the answer now.",
  empty: "No passages matched the query.",
};

/** The reference system's recipe (Qwen2.5-3B on HotpotQA with GRPO): docs/searchr1.md. */
const DEFAULTS: RecipeDefaults = {
  steps: 100,
  promptsPerStep: 512,
  promptsPerTask: 16,
  groupSize: 5,
  rollouts: 1,
  trainers: 1,
  evalEvery: 10,
  evalSize: 512,
  lr: 1e-6,
  klCoef: 0.001,
  gradClip: 1.0,
  microBatch: 8,
  maxToolCalls: 4,
  topK: 3,
  maxTurnTokens: 500,
  maxResponseTokens: 2048,
  temperature: 1,
  bootstrapSteps: 0,
  rolloutResreq: "cpu=8,mem=64g,gpu=1",
  trainerResreq: "cpu=8,mem=128g,gpu=1",
  threads: 0,
};

/**
 * Checks a model folder before any service starts: config.json sane, every
 * weight file present with the shapes config.json implies (sdk/tensor's
 * checkModelFolder reads only the safetensors headers), and a tokenizer.json.
 * Returns the config.
 */
export function checkChatModelFolder(dir: string): Record<string, unknown> {
  const info = checkModelFolder(dir);
  if (!info.hasTokenizer) throw new HearthError(`model folder ${dir}: tokenizer.json is missing (copy it from the model's repository, or make the folder with 'hearth model init')`);
  return info.config;
}

/** An HF chat model on HotpotQA (or the synthetic task). */
export const hfChatRecipe: TaskRecipe<SearchR1Task> = {
  name: "hf-chat",
  defaults: DEFAULTS,
  matches: (model) => model !== "tiny",
  async prepare(o: RunOptions): Promise<SearchR1Task> {
    const modelDir = path.resolve(o.model);
    const config = checkChatModelFolder(modelDir);
    const tokenizer = loadTokenizer(modelDir);
    const vocab = Number(config.vocab_size);
    if (!Number.isInteger(vocab) || vocab < tokenizer.size) {
      throw new HearthError(`--model ${o.model}: config.json's vocab_size (${String(config.vocab_size)}) is smaller than the tokenizer's ${tokenizer.size} ids`);
    }
    const notes: string[] = [];
    if (tokenizer.prompt === "plain") notes.push(`${modelDir}: tokenizer_config.json has no chat_template, so prompts are plain text (instruction, blank line, question)`);
    if (tokenizer.eosIds.length === 0) notes.push(`${modelDir}: no eos ids in generation_config.json or tokenizer_config.json, so only </answer> and the length limits end a response`);
    const base = { recipe: "hf-chat", tokenizer, text: CHAT_TEXT, model: { config }, modelDir, notes };
    if (o.data === "synthetic") {
      const task = syntheticTask({ seed: o.seed, heldOut: Math.max(o.evalSize, 1), people: 1000 + Math.max(o.evalSize, 1) });
      return withSearchEnvironment({ ...base, train: task.train, heldOut: task.heldOut.slice(0, o.evalSize), corpus: task.corpus, describe: `synthetic task (seed ${o.seed}) on ${path.basename(modelDir)}` }, o.topK);
    }
    const data = await loadHotpotQa(o.data, { seed: o.seed, validation: o.evalSize });
    return withSearchEnvironment({
      ...base,
      train: data.train,
      heldOut: data.validation.slice(0, o.evalSize),
      corpus: data.corpus,
      describe: `HotpotQA ${path.basename(o.data)} on ${path.basename(modelDir)}: ${data.train.length} training questions, ${data.validation.length} validation, ${data.corpus.length} passages`,
    }, o.topK);
  },
};
