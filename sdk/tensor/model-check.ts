/**
 * A Hugging Face model folder checked from TypeScript before any service
 * starts: config.json sane, the weight files present and inside the folder,
 * every safetensors header consistent with the config (names and shapes), and
 * optionally the tokenizer files. Only headers are read (a few KB per shard),
 * so a 3B folder checks in milliseconds. The engine repeats these checks when
 * it loads (checkpoint.py); this is the early, clear error.
 */

import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import path from "node:path";
import { HearthError } from "../errors/index.js";

/** What a checked folder holds. */
export interface ModelFolderInfo {
  dir: string;
  config: Record<string, unknown>;
  /** Weight files, relative to dir. */
  weightFiles: string[];
  /** Bytes of the weight files together. */
  weightBytes: number;
  /** Tensors the weights hold (a tied lm_head not counted). */
  tensors: number;
  hasTokenizer: boolean;
  hasGenerationConfig: boolean;
  /** Whether tokenizer_config.json carries a chat_template. */
  hasChatTemplate: boolean;
}

/** Bounds config.json sizes must respect (the engine's config.py LIMITS). */
export const CONFIG_LIMITS: Readonly<Record<string, number>> = {
  vocab_size: 1_000_000,
  hidden_size: 65536,
  intermediate_size: 1 << 20,
  num_hidden_layers: 512,
  num_attention_heads: 1024,
  num_key_value_heads: 1024,
};

const MAX_HEADER = 100 * 1024 * 1024;

function fail(dir: string, message: string): never {
  throw new HearthError(`model folder ${dir}: ${message}`);
}

function readJsonObject(file: string, dir: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    fail(dir, `${path.basename(file)} is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) fail(dir, `${path.basename(file)} is not a JSON object`);
  return value as Record<string, unknown>;
}

/** The shape fields of config.json, checked like the engine does; throws naming the field. */
export function checkConfig(config: Record<string, unknown>, dir = "."): Record<string, number> {
  const type = config.model_type ?? "qwen2";
  if (type !== "qwen2") fail(dir, `config.json model_type '${String(type)}' is not supported (only qwen2: Qwen2, Qwen2.5)`);
  const c: Record<string, number> = {};
  for (const [field, limit] of Object.entries(CONFIG_LIMITS)) {
    const v = field === "num_key_value_heads" ? (config[field] ?? config.num_attention_heads) : config[field];
    if (typeof v !== "number" || !Number.isInteger(v)) fail(dir, `config.json ${field} must be an integer, got ${JSON.stringify(v)}`);
    if (v <= 0 || v > limit) fail(dir, `config.json ${field} = ${v} is out of range: it must be in 1..${limit}`);
    c[field] = v;
  }
  if (c.hidden_size! % c.num_attention_heads! !== 0) fail(dir, `config.json hidden_size ${c.hidden_size} is not divisible by num_attention_heads ${c.num_attention_heads}`);
  if (c.num_attention_heads! % c.num_key_value_heads! !== 0) fail(dir, `config.json num_key_value_heads ${c.num_key_value_heads} does not divide num_attention_heads ${c.num_attention_heads}`);
  if ((c.hidden_size! / c.num_attention_heads!) % 2 !== 0) fail(dir, "config.json head_dim (hidden_size / num_attention_heads) must be even for RoPE");
  return c;
}

/** HF tensor names and shapes a Qwen2 config implies (tied lm_head excluded), like checkpoint.tensor_shapes. */
export function expectedTensorShapes(config: Record<string, unknown>): Map<string, number[]> {
  const c = checkConfig(config);
  const h = c.hidden_size!, i = c.intermediate_size!, d = h / c.num_attention_heads!;
  const q = c.num_attention_heads! * d, kv = c.num_key_value_heads! * d;
  const bias = config.attention_bias !== false;
  const out = new Map<string, number[]>([["model.embed_tokens.weight", [c.vocab_size!, h]]]);
  for (let n = 0; n < c.num_hidden_layers!; n++) {
    const p = `model.layers.${n}.`;
    out.set(p + "input_layernorm.weight", [h]);
    for (const [proj, width] of [["q_proj", q], ["k_proj", kv], ["v_proj", kv]] as const) {
      out.set(`${p}self_attn.${proj}.weight`, [width, h]);
      if (bias) out.set(`${p}self_attn.${proj}.bias`, [width]);
    }
    out.set(p + "self_attn.o_proj.weight", [h, q]);
    out.set(p + "post_attention_layernorm.weight", [h]);
    out.set(p + "mlp.gate_proj.weight", [i, h]);
    out.set(p + "mlp.up_proj.weight", [i, h]);
    out.set(p + "mlp.down_proj.weight", [h, i]);
  }
  out.set("model.norm.weight", [h]);
  if (config.tie_word_embeddings === false) out.set("lm_head.weight", [c.vocab_size!, h]);
  return out;
}

/** Tensor shapes in one safetensors file's header (read without the data). */
export function readSafetensorsShapes(file: string, dir = path.dirname(file)): Map<string, number[]> {
  const fd = openSync(file, "r");
  try {
    const size = fstatSync(fd).size;
    const len = Buffer.alloc(8);
    if (size < 8 || readSync(fd, len, 0, 8, 0) !== 8) fail(dir, `${path.basename(file)} is ${size} bytes: too short for a safetensors file`);
    const n = Number(len.readBigUInt64LE());
    if (n > MAX_HEADER || 8 + n > size) fail(dir, `${path.basename(file)}: header length ${n} does not fit in a ${size}-byte file (corrupt or truncated)`);
    const json = Buffer.alloc(n);
    readSync(fd, json, 0, n, 8);
    let header: Record<string, { shape?: unknown; data_offsets?: unknown }>;
    try {
      header = JSON.parse(json.toString("utf8")) as typeof header;
    } catch (err) {
      fail(dir, `${path.basename(file)}: header is not valid JSON: ${(err as Error).message}`);
    }
    const shapes = new Map<string, number[]>();
    for (const [name, info] of Object.entries(header)) {
      if (name === "__metadata__") continue;
      const shape = info?.shape;
      if (!Array.isArray(shape) || !shape.every((s) => Number.isSafeInteger(s) && (s as number) >= 0)) {
        fail(dir, `${path.basename(file)}: tensor ${name} has shape ${JSON.stringify(shape)} (non-negative integers expected)`);
      }
      const offs = info.data_offsets;
      if (!Array.isArray(offs) || offs.length !== 2 || !offs.every((o) => Number.isSafeInteger(o)) || (offs[1] as number) > size - 8 - n) {
        fail(dir, `${path.basename(file)}: tensor ${name} has data_offsets ${JSON.stringify(offs)} outside the file (corrupt or truncated)`);
      }
      shapes.set(name, shape as number[]);
    }
    return shapes;
  } finally {
    closeSync(fd);
  }
}

/** Weight file of each tensor: the index's weight_map, or every tensor of model.safetensors. */
function weightMap(dir: string): Map<string, string> {
  const index = path.join(dir, "model.safetensors.index.json");
  if (existsSync(index)) {
    const map = readJsonObject(index, dir).weight_map;
    if (typeof map !== "object" || map === null || Array.isArray(map)) fail(dir, "model.safetensors.index.json has no weight_map object");
    const out = new Map<string, string>();
    for (const [name, file] of Object.entries(map as Record<string, unknown>)) {
      if (typeof file !== "string" || !file || path.isAbsolute(file) || path.normalize(file).split(/[\\/]/).includes("..")) {
        fail(dir, `the shard index names ${JSON.stringify(file)} for ${name}: shards must be plain file names inside the folder`);
      }
      out.set(name, path.normalize(file));
    }
    return out;
  }
  if (existsSync(path.join(dir, "model.safetensors"))) {
    return new Map([...readSafetensorsShapes(path.join(dir, "model.safetensors"), dir).keys()].map((n) => [n, "model.safetensors"]));
  }
  fail(dir, "no model.safetensors and no model.safetensors.index.json (only safetensors weights are read)");
}

/**
 * Checks `dir` and returns what it holds, or throws a HearthError saying what
 * is wrong. With `tokenizer`, tokenizer.json and tokenizer_config.json must be there too.
 */
export function checkModelFolder(dir: string, opts: { tokenizer?: boolean } = {}): ModelFolderInfo {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) fail(dir, "no such folder");
  const configFile = path.join(dir, "config.json");
  if (!existsSync(configFile)) fail(dir, "config.json is missing");
  const config = readJsonObject(configFile, dir);
  checkConfig(config, dir);
  const expected = expectedTensorShapes(config);
  const map = weightMap(dir);
  const byFile = new Map<string, string[]>();
  for (const [name, file] of map) byFile.set(file, [...(byFile.get(file) ?? []), name]);
  const found = new Map<string, number[]>();
  let weightBytes = 0;
  for (const [file, names] of byFile) {
    const full = path.join(dir, file);
    if (!existsSync(full)) fail(dir, `weight file ${file} (named by the shard index) is missing`);
    weightBytes += statSync(full).size;
    const shapes = readSafetensorsShapes(full, dir);
    for (const name of names) {
      const shape = shapes.get(name);
      if (!shape) fail(dir, `the shard index puts ${name} in ${file}, which does not hold it`);
      found.set(name, shape);
    }
  }
  if (config.tie_word_embeddings !== false) found.delete("lm_head.weight");
  const missing = [...expected.keys()].filter((n) => !found.has(n));
  const unexpected = [...found.keys()].filter((n) => !expected.has(n));
  const wrong = [...expected].filter(([n, s]) => found.has(n) && found.get(n)!.join(",") !== s.join(","))
    .map(([n, s]) => `${n}: weights [${found.get(n)!.join(", ")}] vs config [${s.join(", ")}]`);
  if (missing.length || unexpected.length || wrong.length) {
    const show = (items: string[]): string => items.slice(0, 6).join(", ") + (items.length > 6 ? ` (+${items.length - 6} more)` : "");
    const parts = [["missing", missing], ["unexpected", unexpected], ["shape mismatch", wrong]]
      .filter(([, items]) => items.length > 0).map(([label, items]) => `${label as string} ${items.length}: ${show(items as string[])}`);
    fail(dir, `the weights do not match config.json: ${parts.join("; ")}`);
  }
  const hasTokenizer = existsSync(path.join(dir, "tokenizer.json"));
  const tokCfgFile = path.join(dir, "tokenizer_config.json");
  if (opts.tokenizer && !hasTokenizer) fail(dir, "tokenizer.json is missing (copy it from the model's repository, or make the folder with `hearth model init`)");
  if (opts.tokenizer && !existsSync(tokCfgFile)) fail(dir, "tokenizer_config.json is missing (it carries the chat template and the eos token)");
  const tokCfg = existsSync(tokCfgFile) ? readJsonObject(tokCfgFile, dir) : {};
  return {
    dir,
    config,
    weightFiles: [...byFile.keys()].sort(),
    weightBytes,
    tensors: found.size,
    hasTokenizer,
    hasGenerationConfig: existsSync(path.join(dir, "generation_config.json")),
    hasChatTemplate: typeof tokCfg.chat_template === "string" || Array.isArray(tokCfg.chat_template),
  };
}
