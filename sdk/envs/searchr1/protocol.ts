/**
 * The Search-R1 interaction protocol's text. The policy reasons in <think>,
 * asks <search>query</search>, reads the passages inserted inside
 * <information>…</information>, and ends with <answer>…</answer>. Generation
 * stops at `</search>` or `</answer>` (environment.ts runs the search; the
 * RL layer's loop, sdk/rl/episodes.ts, inserts what it answers, masked).
 */
import type { TextTokenizer } from "../../rl/text/tokenizer.js";

/**
 * The words the protocol writes, which belong to a task recipe (the synthetic
 * task's word-level vocabulary needs spaced words; a chat model reads plain
 * prose). Shipped to rollout executors as data.
 */
export interface ProtocolText {
  /** The system turn: what the tags mean. */
  instruction: string;
  /** The user turn; `{question}` is replaced by the question. */
  question: string;
  /** One retrieved passage; `{i}` (1-based), `{title}` and `{text}` are replaced. */
  passage: string;
  /** Between two passages. */
  passageSeparator: string;
  /** Opens and closes an information block. */
  informationOpen: string;
  informationClose: string;
  /** Written before and after every inserted block (so inserted text does not glue onto generated text). */
  insertBefore: string;
  insertAfter: string;
  /** Inside an information block: a `</search>` without a usable query. */
  invalid: string;
  /** Inside an information block: a search past the limit. */
  limit: string;
  /** Inside an information block: a search that found nothing. */
  empty: string;
}

/** Strings generation stops at. */
export const STOP_STRINGS = ["</search>", "</answer>"];

/** A retrieved passage. */
export interface Hit {
  title: string;
  text: string;
}

/** What the protocol needs from retrieval. */
export type Retrieve = (query: string, k: number) => Hit[];

/** Renders the prompt for a question with the tokenizer's chat template (plain text without one). */
export function buildPrompt(tokenizer: TextTokenizer, text: ProtocolText, question: string): string {
  return tokenizer.chat(text.instruction, text.question.replaceAll("{question}", question));
}

/** The query of the last `<search>…</search>` in a generated turn, or null when there is none usable. */
export function parseSearch(turn: string): string | null {
  const end = turn.lastIndexOf("</search>");
  if (end < 0) return null;
  const start = turn.lastIndexOf("<search>", end);
  if (start < 0) return null;
  const q = turn.slice(start + "<search>".length, end).trim();
  return q === "" ? null : q;
}

/** An information block holding `inner`. */
export function informationBlock(text: ProtocolText, inner: string): string {
  return `${text.informationOpen}${inner}${text.informationClose}`;
}

/** The information block for a set of hits. */
export function formatInformation(text: ProtocolText, hits: Hit[]): string {
  if (hits.length === 0) return informationBlock(text, text.empty);
  const passages = hits.map((h, i) => text.passage.replaceAll("{i}", String(i + 1)).replaceAll("{title}", h.title).replaceAll("{text}", h.text));
  return informationBlock(text, passages.join(text.passageSeparator));
}

/** What is inserted into a response (an information block with its surrounding text). */
export function insertion(text: ProtocolText, block: string): string {
  return `${text.insertBefore}${block}${text.insertAfter}`;
}
