/**
 * What a run trains on: the questions, the corpus, the tokenizer and the
 * model's shape, from either the synthetic task (embedded default) or a
 * HotpotQA file with a Hugging Face model folder.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { HearthError } from "../wire/errors.js";
import { PROTOCOL_WORDS } from "./protocol.js";
import { loadHotpotQa } from "./hotpotqa.js";
import { syntheticTask, type Passage, type Question, type SyntheticTask } from "./synthetic.js";
import { loadTokenizer, tokenizerFromJson, wordTokenizerJson, type TextTokenizer } from "./tokenizer.js";

/** A prepared task. */
export interface PreparedTask {
  train: Question[];
  heldOut: Question[];
  corpus: Passage[];
  tokenizer: TextTokenizer;
  /** Model config for the engine: a preset name or an HF config dict, plus overrides. */
  model: { config: string | Record<string, unknown>; overrides?: Record<string, unknown> };
  /** HF folder to start from (real models), if any. */
  modelDir?: string;
  /** Trainer settings the task needs (the tiny model keeps its random embeddings frozen). */
  trainer?: { freezeEmbeddings?: boolean; embeddingRms?: number };
  synthetic?: SyntheticTask;
  /** A short description for logs and reports. */
  describe: string;
}

/** Options that pick the task. */
export interface TaskOptions {
  /** A preset (`tiny`) or an HF model folder (config.json, tokenizer.json, safetensors). */
  model: string;
  /** `synthetic` or a HotpotQA JSON file. */
  data: string;
  seed: number;
  /** Held-out questions to evaluate on. */
  evalSize: number;
}

/** Loads the task; errors name the bad model folder, dataset or flag. */
export async function prepareTask(o: TaskOptions): Promise<PreparedTask> {
  let modelDir: string | undefined;
  if (o.model !== "tiny") {
    modelDir = path.resolve(o.model);
    if (!existsSync(modelDir)) throw new HearthError(`--model ${o.model}: no such folder (use the preset 'tiny' or a Hugging Face model folder)`);
    if (!existsSync(path.join(modelDir, "config.json"))) throw new HearthError(`--model ${o.model}: no config.json in ${modelDir}`);
  }
  if (o.data === "synthetic") {
    const task = syntheticTask({ seed: o.seed, heldOut: Math.max(o.evalSize, 1), people: 1000 + Math.max(o.evalSize, 1) });
    const tokenizer = modelDir ? loadTokenizer(modelDir) : tokenizerFromJson(wordTokenizerJson([...task.words, ...PROTOCOL_WORDS]));
    return {
      train: task.train,
      heldOut: task.heldOut.slice(0, o.evalSize),
      corpus: task.corpus,
      tokenizer,
      model: modelDir ? { config: readConfig(modelDir) } : { config: "tiny", overrides: tinySyntheticShape(tokenizer.size) },
      modelDir,
      // Frozen random (tied) embeddings make every entity name look alike to the network, so
      // copying learned on training names also works for held-out names it never saw.
      trainer: modelDir ? undefined : { freezeEmbeddings: true, embeddingRms: 0.5 },
      synthetic: task,
      describe: `synthetic task (seed ${o.seed}): ${task.train.length} training questions, ${Math.min(o.evalSize, task.heldOut.length)} held-out, ${task.corpus.length} passages`,
    };
  }
  if (!modelDir) throw new HearthError(`--data ${o.data}: a HotpotQA run needs a Hugging Face model folder (--model DIR) whose tokenizer covers real text; the tiny preset only knows the synthetic task's words`);
  const data = await loadHotpotQa(o.data, { seed: o.seed, validation: o.evalSize });
  return {
    train: data.train,
    heldOut: data.validation.slice(0, o.evalSize),
    corpus: data.corpus,
    tokenizer: loadTokenizer(modelDir),
    model: { config: readConfig(modelDir) },
    modelDir,
    describe: `HotpotQA ${path.basename(o.data)}: ${data.train.length} training questions, ${data.validation.length} validation, ${data.corpus.length} passages`,
  };
}

/** The tiny model's shape for the synthetic task: small and fast on one CPU thread. */
function tinySyntheticShape(vocab: number): Record<string, unknown> {
  return { vocab_size: vocab, max_position_embeddings: 1024, hidden_size: 64, intermediate_size: 192, num_hidden_layers: 2 };
}

function readConfig(dir: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(path.join(dir, "config.json"), "utf8")) as Record<string, unknown>;
  } catch (err) {
    throw new HearthError(`${path.join(dir, "config.json")} is not valid JSON: ${(err as Error).message}`);
  }
}
