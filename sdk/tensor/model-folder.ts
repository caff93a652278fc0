/**
 * `hearth model init`: a complete Hugging Face model folder with seeded random
 * weights (no weights can be downloaded here), made from a named shape and a
 * real tokenizer. The engine writes config.json and the (sharded) safetensors
 * tensor by tensor; this module adds the tokenizer files and
 * generation_config.json, whose end-of-turn ids come from the tokenizer.
 */

import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { HearthError } from "../errors/index.js";
import { TensorEngine, type TensorEngineOptions } from "./engine.js";

/** What to make. */
export interface ModelFolderOptions {
  /** Engine preset: `qwen2-tiny`, `qwen2.5-0.5b`, `qwen2.5-1.5b`, `qwen2.5-3b` (or any engine preset). */
  preset: string;
  /** A Hugging Face tokenizer.json (copied into the folder). */
  tokenizer: string;
  /** Its tokenizer_config.json (default: the one beside `tokenizer`); copied with its chat_template. */
  tokenizerConfig?: string;
  /** Folder to create; must not exist or be empty. */
  out: string;
  /** Weight seed (default 0): the same seed gives byte-identical weight files. */
  seed?: number;
  /** Shard the weights above this many bytes (default 5 GB, as transformers does). */
  shardSize?: number;
  /** How to start the engine that writes the weights. */
  engine?: TensorEngineOptions;
}

/** What was written. */
export interface ModelFolderResult {
  dir: string;
  /** Every file of the folder, sorted. */
  files: string[];
  /** Weight files (one, or the shards named by model.safetensors.index.json). */
  weightFiles: string[];
  params: number;
  /** generation_config.json's eos_token_id: eos token first, then the pad token when it differs. */
  eosTokenIds: number[];
  /** Things a user should know (e.g. no chat_template), one line each. */
  warnings: string[];
  seconds: number;
}

/** The special-token ids of a tokenizer, resolved through tokenizer.json. */
export interface SpecialTokenIds {
  eos: number;
  pad?: number;
  bos?: number;
  /** One past the largest id the tokenizer can produce: the model's vocab_size must reach it. */
  size: number;
}

interface TokenizerFile {
  model?: { vocab?: Record<string, number> };
  added_tokens?: { id: number; content: string }[];
}

function readJson(file: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new HearthError(`${what} ${file} cannot be read: ${(err as Error).message}`);
  }
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error("not a JSON object");
    return value as Record<string, unknown>;
  } catch (err) {
    throw new HearthError(`${what} ${file} is not valid JSON: ${(err as Error).message}`);
  }
}

/** A token named in tokenizer_config.json: a string, or an AddedToken object `{content}`. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (value && typeof value === "object" && typeof (value as { content?: unknown }).content === "string") {
    return (value as { content: string }).content;
  }
  return undefined;
}

/**
 * eos / pad / bos ids of `tokenizerConfig`'s token strings, looked up among
 * tokenizer.json's added tokens (then its vocabulary). A missing eos token is
 * an error: without it generation never ends a turn.
 */
export function specialTokenIds(tokenizer: TokenizerFile, tokenizerConfig: Record<string, unknown>): SpecialTokenIds {
  const vocab = tokenizer.model?.vocab ?? {};
  const added = new Map<string, number>();
  let size = 0;
  for (const id of Object.values(vocab)) if (id + 1 > size) size = id + 1;
  for (const t of tokenizer.added_tokens ?? []) {
    added.set(t.content, t.id);
    if (t.id + 1 > size) size = t.id + 1;
  }
  const lookup = (field: string): number | undefined => {
    const text = tokenText(tokenizerConfig[field]);
    if (text === undefined) return undefined;
    const id = added.get(text) ?? (Object.hasOwn(vocab, text) ? vocab[text] : undefined);
    if (id === undefined) throw new HearthError(`tokenizer_config.json's ${field} '${text}' is not a token of tokenizer.json`);
    return id;
  };
  const eos = lookup("eos_token");
  if (eos === undefined) throw new HearthError("tokenizer_config.json names no eos_token: a model made from it could never end a turn");
  return { eos, pad: lookup("pad_token"), bos: lookup("bos_token"), size };
}

/** Writes the folder; see ModelFolderOptions. Fails before writing anything when an input is wrong. */
export async function initModelFolder(o: ModelFolderOptions): Promise<ModelFolderResult> {
  const t0 = performance.now();
  const configFile = o.tokenizerConfig ?? path.join(path.dirname(o.tokenizer), "tokenizer_config.json");
  if (!existsSync(o.tokenizer)) throw new HearthError(`--tokenizer ${o.tokenizer}: no such file (a Hugging Face tokenizer.json)`);
  if (!existsSync(configFile)) {
    throw new HearthError(`no tokenizer_config.json at ${configFile}: pass --tokenizer-config FILE (it carries the chat template and the eos token)`);
  }
  if (o.shardSize !== undefined && !(Number.isSafeInteger(o.shardSize) && o.shardSize > 0)) {
    throw new HearthError(`--shard-size must be a positive whole number of bytes; got ${o.shardSize}`);
  }
  if (o.seed !== undefined && !(Number.isSafeInteger(o.seed) && o.seed >= 0)) {
    throw new HearthError(`--seed must be a non-negative integer; got ${o.seed}`);
  }
  if (existsSync(o.out) && readdirSync(o.out).length > 0) {
    throw new HearthError(`--out ${o.out} is not empty: choose a new folder (model init never overwrites one)`);
  }
  const tokenizer = readJson(o.tokenizer, "tokenizer") as TokenizerFile;
  if (!tokenizer.model?.vocab) throw new HearthError(`${o.tokenizer} has no model.vocab: not a Hugging Face tokenizer.json`);
  const tokenizerConfig = readJson(configFile, "tokenizer config");
  const ids = specialTokenIds(tokenizer, tokenizerConfig);
  const warnings: string[] = [];
  if (typeof tokenizerConfig.chat_template !== "string" && !Array.isArray(tokenizerConfig.chat_template)) {
    warnings.push(`${configFile} has no chat_template: prompts for this model fall back to the driver's plain-text format`);
  }
  const eosTokenIds = ids.pad !== undefined && ids.pad !== ids.eos ? [ids.eos, ids.pad] : [ids.eos];
  const tokenIds: Record<string, unknown> = { eos_token_id: ids.eos };
  if (ids.bos !== undefined) tokenIds.bos_token_id = ids.bos;
  if (ids.pad !== undefined) tokenIds.pad_token_id = ids.pad;

  const created = !existsSync(o.out);
  mkdirSync(o.out, { recursive: true });
  let written;
  try {
    const engine = await TensorEngine.start(o.engine);
    try {
      written = await engine.initFolder({
        config: o.preset, path: o.out, seed: o.seed ?? 0, maxShardBytes: o.shardSize, extraConfig: tokenIds, minVocabSize: ids.size,
      });
    } finally {
      await engine.close();
    }
  } catch (err) {
    // Leave no half-written folder that a later --model could mistake for a model.
    if (created) rmSync(o.out, { recursive: true, force: true });
    else for (const name of readdirSync(o.out)) rmSync(path.join(o.out, name), { recursive: true, force: true });
    throw err;
  }
  copyFileSync(o.tokenizer, path.join(o.out, "tokenizer.json"));
  copyFileSync(configFile, path.join(o.out, "tokenizer_config.json"));
  const generation: Record<string, unknown> = { ...tokenIds, eos_token_id: eosTokenIds };
  writeFileSync(path.join(o.out, "generation_config.json"), JSON.stringify(generation, null, 2) + "\n");
  return {
    dir: o.out,
    files: readdirSync(o.out).sort(),
    weightFiles: written.files,
    params: written.params,
    eosTokenIds,
    warnings,
    seconds: (performance.now() - t0) / 1000,
  };
}
