/**
 * The agent policies' tokenizer: a byte-level BPE tokenizer.json whose
 * decode is exact (any text, unicode included, round-trips), small enough
 * for a 64-wide CPU policy, with Qwen2.5's special tokens and chat template.
 *
 * - The model is BPE with `ignore_merges` and no merges: a pre-tokenized
 *   piece that is a vocabulary word is one id; any other falls back to its
 *   bytes (all 256 byte symbols are in the vocabulary: never an unknown).
 * - The pre-tokenizer splits runs of digits, runs of letters, punctuation
 *   (with at most one space before it) and whitespace. Neither a number nor
 *   a word ever takes a leading space, so a number 0–9,999 or a name is the
 *   same one id wherever it stands (question, call arguments, tool result,
 *   answer): with frozen random embeddings (docs/calculator.md) copying a
 *   number, or a chain task's name, learned on some works on all.
 * - Added tokens: Qwen2.5's `<|endoftext|>`, `<|im_start|>`, `<|im_end|>`
 *   (special), `<tool_call>`, `</tool_call>`, `<tool_response>`,
 *   `</tool_response>`, and the template's fixed text as single tokens (the
 *   default system line, the tools block's head and tail, a tool result
 *   turn's opening and closing, a call's glue), which keeps prompts and
 *   calls short. Added tokens match leftmost-longest (both the JS and the
 *   Rust tokenizers), and a turn's pieces are encoded apart (conversation.ts),
 *   so these never span a boundary between what was sampled and what was
 *   rendered.
 *
 * tokenizer_config.json carries the chat template, `<|im_end|>` as eos and
 * `<|endoftext|>` as pad; generation_config.json lists both as eos ids.
 */
import type { TokenizerFiles } from "../../rl/text/tokenizer.js";
import { AGENT_CHAT_TEMPLATE, CALL_ARGUMENTS, CALL_CLOSE, CALL_OPEN, END_OF_TEXT, GENERATION_PROMPT, IM_END, IM_START, QWEN_DEFAULT_SYSTEM, RESPONSE_BETWEEN, RESPONSE_CLOSE, RESPONSE_OPEN, TOOLS_HEAD, TOOLS_TAIL } from "./chat-format.js";

/** The pre-tokenizer's pattern (a tokenizer.json `Split` regex; `u` flag semantics). */
export const AGENT_SPLIT = "\\p{N}+|\\p{L}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/** Special tokens (Qwen2.5's). */
export const SPECIAL_TOKENS: readonly string[] = [END_OF_TEXT, IM_START, IM_END];

/** Added tokens that are not special: the tool tags and the template's fixed text. */
export const TEMPLATE_TOKENS: readonly string[] = [
  "<tool_call>",
  "</tool_call>",
  "<tool_response>",
  "</tool_response>",
  `${IM_START}system\n`,
  `${IM_START}user\n`,
  `${IM_START}assistant\n`,
  `${IM_END}\n${IM_START}user\n`,
  GENERATION_PROMPT,
  QWEN_DEFAULT_SYSTEM,
  TOOLS_HEAD,
  TOOLS_TAIL,
  RESPONSE_OPEN,
  RESPONSE_BETWEEN,
  RESPONSE_CLOSE,
  CALL_OPEN,
  CALL_ARGUMENTS,
  CALL_CLOSE,
];

/** The largest number that is one word of the vocabulary (every number from 0 up to it is). */
export const MAX_NUMBER_WORD = 9999;

/** GPT-2's byte → printable symbol table (the byte-level alphabet of tokenizer.json). */
function byteSymbols(): string[] {
  const printable = new Set<number>();
  for (let b = 33; b <= 126; b++) printable.add(b);
  for (let b = 161; b <= 172; b++) printable.add(b);
  for (let b = 174; b <= 255; b++) printable.add(b);
  const out: string[] = [];
  let n = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCodePoint(printable.has(b) ? b : 256 + n++);
  return out;
}

const BYTES = byteSymbols();

/** A word spelled in the byte-level alphabet (how tokenizer.json's vocabulary writes it). */
export function byteLevel(word: string): string {
  let s = "";
  for (const b of Buffer.from(word, "utf8")) s += BYTES[b]!;
  return s;
}

/** Splits `text` at the added tokens, leftmost-longest: the sections the pre-tokenizer sees, and the added tokens between them. */
export function addedSections(text: string, added: readonly string[] = [...SPECIAL_TOKENS, ...TEMPLATE_TOKENS]): Array<{ text: string; added: boolean }> {
  const out: Array<{ text: string; added: boolean }> = [];
  let start = 0;
  for (let i = 0; i < text.length; ) {
    let best = "";
    for (const a of added) if (a.length > best.length && text.startsWith(a, i)) best = a;
    if (best === "") {
      i++;
      continue;
    }
    if (i > start) out.push({ text: text.slice(start, i), added: false });
    out.push({ text: best, added: true });
    i += best.length;
    start = i;
  }
  if (start < text.length) out.push({ text: text.slice(start), added: false });
  return out;
}

/** The pieces the pre-tokenizer makes of `text` (added tokens apart): what can be a vocabulary word. */
export function pieces(text: string): string[] {
  const split = new RegExp(AGENT_SPLIT, "gu");
  return addedSections(text).flatMap((s) => (s.added ? [] : (s.text.match(split) ?? [])));
}

/** The words of a corpus of texts: every piece they hold, once, in order of first sight. */
export function corpusWords(texts: Iterable<string>): string[] {
  const seen = new Set<string>();
  for (const t of texts) for (const p of pieces(t)) seen.add(p);
  return [...seen];
}

/** Builds the tokenizer's files over `words` (plus every byte and every number to MAX_NUMBER_WORD). */
export function agentTokenizerFiles(words: Iterable<string>): TokenizerFiles {
  const vocab: Record<string, number> = {};
  let next = 0;
  const add = (symbols: string): void => {
    if (!(symbols in vocab)) vocab[symbols] = next++;
  };
  for (const b of BYTES) add(b);
  for (let n = 0; n <= MAX_NUMBER_WORD; n++) add(byteLevel(String(n)));
  for (const w of [...new Set(words)].sort()) if (w !== "") add(byteLevel(w));
  const added = [...SPECIAL_TOKENS, ...TEMPLATE_TOKENS].map((content) => ({ id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: SPECIAL_TOKENS.includes(content) }));
  const byteLevelStep = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: AGENT_SPLIT }, behavior: "Isolated", invert: false }, byteLevelStep] },
    post_processor: null,
    decoder: byteLevelStep,
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges: [] },
  };
  const id = (t: string) => added.find((a) => a.content === t)!.id;
  const config = {
    add_bos_token: false,
    add_prefix_space: false,
    bos_token: null,
    eos_token: IM_END,
    pad_token: END_OF_TEXT,
    unk_token: null,
    errors: "replace",
    clean_up_tokenization_spaces: false,
    model_max_length: 1024,
    split_special_tokens: false,
    tokenizer_class: "Qwen2Tokenizer",
    additional_special_tokens: [IM_START, IM_END],
    chat_template: AGENT_CHAT_TEMPLATE,
  };
  const generation = { eos_token_id: [id(IM_END), id(END_OF_TEXT)], pad_token_id: id(END_OF_TEXT), bos_token_id: id(END_OF_TEXT) };
  const json = (v: unknown, indent?: number) => Buffer.from(`${JSON.stringify(v, null, indent)}\n`);
  return { "tokenizer.json": json(tokenizer), "tokenizer_config.json": json(config, 2), "generation_config.json": json(generation, 2) };
}

