/**
 * Tokenization for Search-R1, in TypeScript: any Hugging Face `tokenizer.json`
 * loads through @huggingface/tokenizers (the chat template, when the
 * tokenizer_config has one, renders through @huggingface/jinja). The tiny
 * synthetic model uses a word-level vocabulary we generate as a tokenizer.json
 * (a WordPiece model whose vocabulary holds whole words, with the protocol's
 * tags as added tokens), so its softmax covers hundreds of words, not 150k.
 */
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { byteLevelVocab, type TokenizerJson } from "../tensor/index.js";
import { HearthError } from "../wire/errors.js";

/** The protocol's tags; single tokens in the word-level vocabulary. */
export const TAGS = ["<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<answer>", "</answer>"] as const;

/** What the rollout and the driver need from a tokenizer. */
export interface TextTokenizer {
  /** Vocabulary size (the model's vocab_size must be at least this). */
  readonly size: number;
  encode(text: string): number[];
  decode(ids: ArrayLike<number>): string;
  /** The UTF-8 bytes each id stands for, for stop strings in the engine. */
  pieces(): Uint8Array[];
  /** Renders a system + user turn with the chat template, ending where the assistant speaks; plain text without one. */
  chat(system: string, user: string): string;
  /** The files to ship (tokenizer.json and, if any, tokenizer_config.json). */
  readonly files: { tokenizer: unknown; config?: unknown };
}

interface HfFiles {
  tokenizer: TokenizerJson & Record<string, any>;
  config?: Record<string, any>;
}

class HfTokenizer implements TextTokenizer {
  private readonly tok: Tokenizer;
  private readonly template?: Template;
  readonly size: number;

  constructor(readonly files: HfFiles) {
    this.tok = new Tokenizer(files.tokenizer as any, (files.config ?? {}) as any);
    const vocab = files.tokenizer.model?.vocab as Record<string, number> | undefined;
    let max = vocab ? Math.max(...Object.values(vocab)) : 0;
    for (const t of (files.tokenizer.added_tokens ?? []) as Array<{ id: number }>) max = Math.max(max, t.id);
    this.size = max + 1;
    const tpl = files.config?.chat_template;
    if (typeof tpl === "string") this.template = new Template(tpl);
  }

  encode(text: string): number[] {
    return this.tok.encode(text).ids;
  }

  decode(ids: ArrayLike<number>): string {
    return this.tok.decode(Array.from(ids));
  }

  pieces(): Uint8Array[] {
    const model = this.files.tokenizer.model as { type?: string; vocab?: Record<string, number> };
    if (model?.type === "WordPiece") {
      const out: Uint8Array[] = Array.from({ length: this.size }, () => new Uint8Array(0));
      for (const [w, id] of Object.entries(model.vocab ?? {})) out[id] = Buffer.from(w.startsWith("##") ? w.slice(2) : ` ${w}`);
      for (const t of (this.files.tokenizer.added_tokens ?? []) as Array<{ id: number; content: string }>) out[t.id] = Buffer.from(` ${t.content}`);
      return out;
    }
    return byteLevelVocab(this.files.tokenizer, this.size);
  }

  chat(system: string, user: string): string {
    if (!this.template) return `${system}\n${user}\n`;
    return this.template.render({
      messages: [
        { role: "system", content: system },
        { role: "user", content: user },
      ],
      add_generation_prompt: true,
      bos_token: this.files.config?.bos_token ?? "",
      eos_token: this.files.config?.eos_token ?? "",
    });
  }
}

/** Wraps parsed tokenizer.json (and tokenizer_config.json) contents. */
export function tokenizerFromJson(tokenizer: unknown, config?: unknown): TextTokenizer {
  if (!tokenizer || typeof tokenizer !== "object" || !("model" in tokenizer)) {
    throw new HearthError("not a tokenizer.json: expected an object with a 'model' field");
  }
  return new HfTokenizer({ tokenizer: tokenizer as HfFiles["tokenizer"], config: config as HfFiles["config"] });
}

/** Loads `tokenizer.json` (and `tokenizer_config.json` if present) from a model folder. */
export function loadTokenizer(dir: string): TextTokenizer {
  const file = path.join(dir, "tokenizer.json");
  if (!existsSync(file)) throw new HearthError(`no tokenizer.json in ${dir}: a model folder needs config.json, tokenizer.json and safetensors weights`);
  const cfg = path.join(dir, "tokenizer_config.json");
  try {
    return tokenizerFromJson(JSON.parse(readFileSync(file, "utf8")), existsSync(cfg) ? JSON.parse(readFileSync(cfg, "utf8")) : undefined);
  } catch (err) {
    throw new HearthError(`could not load ${file}: ${(err as Error).message}`);
  }
}

/** Builds a word-level tokenizer.json over `words` (lowercased; tags as added tokens). */
export function wordTokenizerJson(words: Iterable<string>): Record<string, unknown> {
  const vocab: Record<string, number> = { "[UNK]": 0, "[PAD]": 1 };
  let next = 2;
  for (const tag of TAGS) vocab[tag] = next++;
  for (const w of [...new Set([...words].map((w) => w.toLowerCase()))].sort()) if (!(w in vocab)) vocab[w] = next++;
  return {
    version: "1.0",
    added_tokens: TAGS.map((t) => ({ id: vocab[t], content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false })),
    normalizer: { type: "Lowercase" },
    pre_tokenizer: { type: "Whitespace" },
    post_processor: null,
    decoder: { type: "WordPiece", prefix: "##", cleanup: false },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}
