/**
 * The recipe for a Hugging Face chat model (a folder with config.json,
 * safetensors weights, tokenizer.json and, usually, a chat template) on
 * HotpotQA or the synthetic task: a Search-R1 style instruction in plain
 * English, passages formatted as numbered documents, and the reference
 * system's training recipe as defaults (docs/searchr1.md lists them).
 */
import { closeSync, existsSync, openSync, readFileSync, readSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { HearthError } from "../../wire/errors.js";
import { loadHotpotQa } from "../hotpotqa.js";
import type { SearchR1Options } from "../options.js";
import type { ProtocolText } from "../protocol.js";
import type { PreparedTask, TaskRecipe } from "../recipe.js";
import { syntheticTask } from "../synthetic.js";
import { loadTokenizer } from "../tokenizer.js";

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
const DEFAULTS: TaskRecipe["defaults"] = {
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
  maxSearches: 4,
  topK: 3,
  maxTurnTokens: 500,
  maxResponseTokens: 2048,
  temperature: 1,
  bootstrapSteps: 0,
  rolloutResreq: "cpu=8,mem=64g,gpu=1",
  trainerResreq: "cpu=8,mem=128g,gpu=1",
  threads: 0,
};

/** What a model folder must hold; checked before any service starts. */
export function checkModelFolder(dir: string): Record<string, unknown> {
  if (!existsSync(dir)) throw new HearthError(`--model ${dir}: no such folder (use the preset 'tiny' or a Hugging Face model folder)`);
  const missing = ["config.json", "tokenizer.json"].filter((f) => !existsSync(path.join(dir, f)));
  const names = readdirSync(dir);
  if (!names.some((n) => n.endsWith(".safetensors"))) missing.push("model.safetensors (or shards with model.safetensors.index.json)");
  if (missing.length > 0) throw new HearthError(`--model ${dir}: missing ${missing.join(", ")} (a Hugging Face folder needs config.json, safetensors weights and tokenizer.json; 'hearth model init' writes one)`);
  let config: Record<string, unknown>;
  try {
    config = JSON.parse(readFileSync(path.join(dir, "config.json"), "utf8")) as Record<string, unknown>;
  } catch (err) {
    throw new HearthError(`${path.join(dir, "config.json")} is not valid JSON: ${(err as Error).message}`);
  }
  if (names.some((n) => /^model-\d+-of-\d+\.safetensors$/.test(n)) && !names.includes("model.safetensors.index.json")) {
    throw new HearthError(`--model ${dir}: sharded weights without model.safetensors.index.json`);
  }
  return config;
}

/** Reads the JSON header of a safetensors file (8-byte little-endian length, then JSON), bounded. */
function safetensorsHeader(file: string): Record<string, { shape?: number[] }> {
  const fd = openSync(file, "r");
  try {
    const len = Buffer.alloc(8);
    if (readSync(fd, len, 0, 8, 0) !== 8) throw new Error("shorter than its 8-byte header length");
    const n = Number(len.readBigUInt64LE(0));
    if (n <= 0 || n > 100 * 1024 * 1024 || 8 + n > statSync(file).size) throw new Error(`header length ${n} does not fit the file`);
    const buf = Buffer.alloc(n);
    readSync(fd, buf, 0, n, 8);
    return JSON.parse(buf.toString("utf8")) as Record<string, { shape?: number[] }>;
  } catch (err) {
    throw new HearthError(`${file} is not a valid safetensors file: ${(err as Error).message}`);
  } finally {
    closeSync(fd);
  }
}

/**
 * Compares the weights' shapes with config.json before anything starts: the
 * embedding [vocab_size, hidden_size], the layer count, the MLP width and the
 * attention projections. The error names the tensor and both shapes.
 */
export function checkWeightsAgainstConfig(dir: string, config: Record<string, unknown>): void {
  const shapes = new Map<string, number[]>();
  for (const name of readdirSync(dir).filter((n) => n.endsWith(".safetensors"))) {
    for (const [k, v] of Object.entries(safetensorsHeader(path.join(dir, name)))) if (k !== "__metadata__" && Array.isArray(v.shape)) shapes.set(k, v.shape);
  }
  const c = (k: string): number => Number(config[k]);
  const heads = c("num_attention_heads");
  const kvHeads = Number(config.num_key_value_heads ?? heads);
  const headDim = Number(config.head_dim ?? c("hidden_size") / heads);
  const expect: Array<[string, number[]]> = [
    ["model.embed_tokens.weight", [c("vocab_size"), c("hidden_size")]],
    ["model.layers.0.mlp.gate_proj.weight", [c("intermediate_size"), c("hidden_size")]],
    ["model.layers.0.self_attn.q_proj.weight", [heads * headDim, c("hidden_size")]],
    ["model.layers.0.self_attn.k_proj.weight", [kvHeads * headDim, c("hidden_size")]],
  ];
  for (const [name, want] of expect) {
    const got = shapes.get(name);
    if (!got) throw new HearthError(`${dir}: the weights have no tensor ${name} (is this a Qwen2-family checkpoint?)`);
    if (got.length !== want.length || got.some((d, i) => d !== want[i])) {
      throw new HearthError(`${dir}: ${name} is [${got.join(", ")}] in the weights but config.json implies [${want.join(", ")}]: the config does not match these weights`);
    }
  }
  let layers = 0;
  for (const k of shapes.keys()) {
    const m = /^model\.layers\.(\d+)\./.exec(k);
    if (m) layers = Math.max(layers, Number(m[1]) + 1);
  }
  if (layers !== c("num_hidden_layers")) throw new HearthError(`${dir}: the weights have ${layers} layers but config.json says num_hidden_layers ${String(config.num_hidden_layers)}`);
}

/** An HF chat model on HotpotQA (or the synthetic task). */
export const hfChatRecipe: TaskRecipe = {
  name: "hf-chat",
  defaults: DEFAULTS,
  matches: (model) => model !== "tiny",
  async prepare(o: SearchR1Options): Promise<PreparedTask> {
    const modelDir = path.resolve(o.model);
    const config = checkModelFolder(modelDir);
    checkWeightsAgainstConfig(modelDir, config);
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
      return { ...base, train: task.train, heldOut: task.heldOut.slice(0, o.evalSize), corpus: task.corpus, describe: `synthetic task (seed ${o.seed}) on ${path.basename(modelDir)}` };
    }
    const data = await loadHotpotQa(o.data, { seed: o.seed, validation: o.evalSize });
    return {
      ...base,
      train: data.train,
      heldOut: data.validation.slice(0, o.evalSize),
      corpus: data.corpus,
      describe: `HotpotQA ${path.basename(o.data)} on ${path.basename(modelDir)}: ${data.train.length} training questions, ${data.validation.length} validation, ${data.corpus.length} passages`,
    };
  },
};
