/**
 * Tokenization for Search-R1, in TypeScript: any Hugging Face `tokenizer.json`
 * loads through @huggingface/tokenizers; the chat template of
 * tokenizer_config.json renders through @huggingface/jinja with a time bound
 * (chat-template.ts); the end-of-turn ids come from generation_config.json and
 * tokenizer_config.json. Nothing special is added when encoding: the
 * instruction, retrieved passages and answers are plain text, and only the
 * chat template places special tokens.
 *
 * A tokenizer travels to executors as its raw files (`files`), never as a
 * parsed object: a 151k-entry vocabulary is one binary frame, not a map.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { byteLevelVocab, type TokenizerJson } from "../../tensor/index.js";
import { HearthError } from "../../errors/index.js";
import { ChatPrompt, TEMPLATE_TIMEOUT_MS } from "./chat-template.js";
import type { SpecialTokens } from "./chat-messages.js";

/** The protocol's tags; single tokens in the word-level vocabulary. */
export const TAGS = ["<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<answer>", "</answer>"] as const;

/** The files of a model folder that make its tokenizer (tokenizer.json is required). */
export const TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"] as const;

/** A tokenizer's files by name, as raw bytes. */
export type TokenizerFiles = Record<string, Uint8Array>;

/** What the rollout and the driver need from a tokenizer. */
export interface TextTokenizer {
  /** Vocabulary size (the model's vocab_size must be at least this). */
  readonly size: number;
  /** Token ids of `text`, with no special tokens added. */
  encode(text: string): number[];
  decode(ids: ArrayLike<number>): string;
  /** The UTF-8 bytes each id stands for, for stop strings in the engine. */
  pieces(): Uint8Array[];
  /** Renders a system + user turn with the chat template, ending where the assistant speaks; plain text without one. */
  chat(system: string, user: string): string;
  /** Ids that end an assistant turn (generation_config.json's eos_token_id, tokenizer_config.json's eos_token). */
  readonly eosIds: number[];
  /** How prompts are rendered: the folder's chat template, or plain text (`system`, blank line, `user`). */
  readonly prompt: "chat-template" | "plain";
  /** The files to ship (tokenizer.json and, when present, the configs). */
  readonly files: TokenizerFiles;
  /** The chat template's source and the special tokens it reads (absent: the folder has none); chat-messages.ts renders messages and tools with it. */
  readonly template?: { source: string; special: SpecialTokens };
}

type Json = Record<string, any>;

class HfTokenizer implements TextTokenizer {
  readonly size: number;
  readonly eosIds: number[];
  readonly prompt: "chat-template" | "plain";

  constructor(
    readonly files: TokenizerFiles,
    private readonly json: Json,
    private readonly config: Json | undefined,
    private readonly tok: Tokenizer,
    private readonly prompter: ChatPrompt | undefined,
    generation: Json | undefined,
    readonly template?: { source: string; special: SpecialTokens },
  ) {
    let max = -1;
    for (const id of Object.values((json.model?.vocab ?? {}) as Record<string, number>)) if (id > max) max = id;
    for (const t of (json.added_tokens ?? []) as Array<{ id: number }>) if (t.id > max) max = t.id;
    this.size = max + 1;
    this.eosIds = eosIds(json, config, generation);
    this.prompt = prompter ? "chat-template" : "plain";
  }

  encode(text: string): number[] {
    return this.tok.encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: ArrayLike<number>): string {
    // The library refuses an empty list; nothing decodes to nothing.
    return ids.length === 0 ? "" : this.tok.decode(Array.from(ids));
  }

  pieces(): Uint8Array[] {
    const model = this.json.model as { type?: string; vocab?: Record<string, number> };
    if (model?.type === "WordPiece") {
      const out: Uint8Array[] = Array.from({ length: this.size }, () => new Uint8Array(0));
      for (const [w, id] of Object.entries(model.vocab ?? {})) out[id] = Buffer.from(w.startsWith("##") ? w.slice(2) : ` ${w}`);
      for (const t of (this.json.added_tokens ?? []) as Array<{ id: number; content: string }>) out[t.id] = Buffer.from(` ${t.content}`);
      return out;
    }
    return byteLevelVocab(this.json as TokenizerJson, this.size);
  }

  chat(system: string, user: string): string {
    if (!this.prompter) return `${system}\n\n${user}\n`;
    return this.prompter.render(system, user);
  }
}

/** The id of a token given as text (or an AddedToken-like object), if the vocabulary has it. */
function tokenId(json: Json, token: unknown): number | undefined {
  const text = typeof token === "string" ? token : typeof token === "object" && token && "content" in token ? String((token as { content: unknown }).content) : undefined;
  if (text === undefined) return undefined;
  const added = ((json.added_tokens ?? []) as Array<{ id: number; content: string }>).find((t) => t.content === text);
  return added?.id ?? (json.model?.vocab as Record<string, number> | undefined)?.[text];
}

function eosIds(json: Json, config: Json | undefined, generation: Json | undefined): number[] {
  const ids = new Set<number>();
  const g = generation?.eos_token_id;
  for (const id of Array.isArray(g) ? g : g === undefined || g === null ? [] : [g]) {
    if (!Number.isInteger(id)) throw new HearthError(`generation_config.json: eos_token_id must be an id or a list of ids; got ${JSON.stringify(g)}`);
    ids.add(id as number);
  }
  const fromConfig = tokenId(json, config?.eos_token);
  if (fromConfig !== undefined) ids.add(fromConfig);
  return [...ids].sort((a, b) => a - b);
}

function parse(files: TokenizerFiles, name: string): Json | undefined {
  const data = files[name];
  if (data === undefined) return undefined;
  try {
    const v = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8")) as unknown;
    if (!v || typeof v !== "object" || Array.isArray(v)) throw new Error("expected a JSON object");
    return v as Json;
  } catch (err) {
    throw new HearthError(`${name} is not valid: ${(err as Error).message}`);
  }
}

/** The chat template's source: a string, or the `default` entry of a list of named templates. */
function templateSource(config: Json | undefined): string | undefined {
  const t = config?.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = (t as Array<{ name?: string; template?: string }>).find((x) => x.name === "default") ?? t[0];
    if (typeof named?.template === "string") return named.template;
  }
  return undefined;
}

/** Options of `tokenizerFromFiles`. */
export interface TokenizerOptions {
  /** Bound on rendering the chat template once (ms). */
  templateTimeoutMs?: number;
}

/** Builds a tokenizer from its files (tokenizer.json, and optionally tokenizer_config.json and generation_config.json). */
export function tokenizerFromFiles(files: TokenizerFiles, opts: TokenizerOptions = {}): TextTokenizer {
  const json = parse(files, "tokenizer.json");
  if (!json || typeof json.model !== "object" || json.model === null) {
    throw new HearthError("not a tokenizer.json: expected an object with a 'model' field");
  }
  const config = parse(files, "tokenizer_config.json");
  const generation = parse(files, "generation_config.json");
  let tok: Tokenizer;
  try {
    tok = new Tokenizer(json as any, (config ?? {}) as any);
  } catch (err) {
    throw new HearthError(`tokenizer.json could not be loaded: ${(err as Error).message}`);
  }
  const source = templateSource(config);
  const special = { bos_token: tokenText(config?.bos_token), eos_token: tokenText(config?.eos_token) };
  const template = source === undefined ? undefined : ChatPrompt.compile(source, special, opts.templateTimeoutMs ?? TEMPLATE_TIMEOUT_MS);
  return new HfTokenizer(files, json, config, tok, template, generation, source === undefined ? undefined : { source, special });
}

function tokenText(t: unknown): string {
  if (typeof t === "string") return t;
  if (t && typeof t === "object" && "content" in t) return String((t as { content: unknown }).content);
  return "";
}

/** Wraps parsed tokenizer.json (and tokenizer_config.json) contents (tests and generated vocabularies). */
export function tokenizerFromJson(tokenizer: unknown, config?: unknown): TextTokenizer {
  const files: TokenizerFiles = { "tokenizer.json": Buffer.from(JSON.stringify(tokenizer)) };
  if (config !== undefined) files["tokenizer_config.json"] = Buffer.from(JSON.stringify(config));
  return tokenizerFromFiles(files);
}

/** Reads the tokenizer files of a model folder (tokenizer.json required). */
export function readTokenizerFiles(dir: string): TokenizerFiles {
  const file = path.join(dir, "tokenizer.json");
  if (!existsSync(file)) throw new HearthError(`no tokenizer.json in ${dir}: a model folder needs config.json, tokenizer.json and safetensors weights`);
  const files: TokenizerFiles = {};
  for (const name of TOKENIZER_FILES) if (existsSync(path.join(dir, name))) files[name] = readFileSync(path.join(dir, name));
  return files;
}

/** Loads the tokenizer of a model folder; errors name the file. */
export function loadTokenizer(dir: string, opts: TokenizerOptions = {}): TextTokenizer {
  try {
    return tokenizerFromFiles(readTokenizerFiles(dir), opts);
  } catch (err) {
    if (err instanceof HearthError && err.message.includes(dir)) throw err;
    throw new HearthError(`could not load the tokenizer of ${dir}: ${(err as Error).message}`, { cause: err });
  }
}

/** Builds a word-level tokenizer.json over `words` (lowercased), with `tags` (default Search-R1's) as added tokens, each one id. */
export function wordTokenizerJson(words: Iterable<string>, tags: readonly string[] = TAGS): Record<string, unknown> {
  const vocab: Record<string, number> = { "[UNK]": 0, "[PAD]": 1 };
  let next = 2;
  for (const tag of tags) vocab[tag] = next++;
  for (const w of [...new Set([...words].map((w) => w.toLowerCase()))].sort()) if (!(w in vocab)) vocab[w] = next++;
  return {
    version: "1.0",
    added_tokens: tags.map((t) => ({ id: vocab[t], content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false })),
    normalizer: { type: "Lowercase" },
    pre_tokenizer: { type: "Whitespace" },
    post_processor: null,
    decoder: { type: "WordPiece", prefix: "##", cleanup: false },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}
