/**
 * The Search-R1 interaction protocol. The policy reasons in <think>, asks
 * <search>query</search>, reads the passages we append inside
 * <information>…</information>, and ends with <answer>…</answer>. Generation
 * stops at `</search>` or `</answer>`; a search is answered from the local
 * retriever and generation resumes on the same KV cache. Every token carries
 * a mask bit: 1 for what the policy generated (trained), 0 for the prompt and
 * everything we inserted (retrieved passages, corrective messages).
 */
import type { TensorEngine } from "../../tensor/index.js";
import type { GeneratedRow } from "../../tensor/types.js";
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

/** Limits and sampling of one batch of episodes. */
export interface ProtocolOptions {
  /** Searches allowed per sample (default 4). */
  maxSearches?: number;
  /** Passages per search (default 3). */
  topK?: number;
  /** Tokens one generation turn may produce (default 64). */
  maxTurnTokens?: number;
  /** Tokens of the whole response, inserted text included (default 320). */
  maxResponseTokens?: number;
  /** 0 = greedy. Default 1. */
  temperature?: number;
  topP?: number;
  /** One seed for the batch (ignored when `seeds` is given). */
  seed?: number;
  /**
   * One seed per row (see deriveSeed): each row then samples from its own
   * stream, so its tokens do not depend on which other rows share its batch,
   * which executor ran it, or when.
   */
  seeds?: number[];
}

/** One finished episode. */
export interface Episode {
  promptLength: number;
  /** Prompt + response tokens. */
  tokens: Int32Array;
  /** 1 where the policy generated the token. */
  mask: Uint8Array;
  /** Rollout logprob of each generated token (0 elsewhere). */
  logprobs: Float32Array;
  /** The response as text (generated and inserted). */
  response: string;
  searches: string[];
  /** How it ended: answered, truncated by a limit, or an end-of-turn token. */
  finish: "answer" | "length" | "eos";
}

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

interface RowState {
  tokens: number[];
  mask: number[];
  logprobs: number[];
  searches: string[];
  done: boolean;
  finish: Episode["finish"];
}

/** What the protocol needs from a tensor engine (tests pass a scripted fake). */
export type EpisodeEngine = Pick<TensorEngine, "generate" | "resume" | "release">;

/**
 * Runs one batch of episodes on an engine: generate, answer searches, resume,
 * until every row answered or hit a limit.
 */
export async function runEpisodes(
  engine: EpisodeEngine,
  tokenizer: TextTokenizer,
  text: ProtocolText,
  retrieve: Retrieve,
  prompts: number[][],
  opts: ProtocolOptions = {},
): Promise<Episode[]> {
  const maxSearches = opts.maxSearches ?? 4;
  const topK = opts.topK ?? 3;
  const maxTurn = opts.maxTurnTokens ?? 64;
  const maxResponse = opts.maxResponseTokens ?? 320;
  // End-of-turn ids (e.g. <|im_end|>) end an episode like the length limit does: the turn is over.
  const sampling = { temperature: opts.temperature ?? 1, topP: opts.topP ?? 1, stop: STOP_STRINGS, eosTokenIds: tokenizer.eosIds };
  const states: RowState[] = prompts.map((p) => ({ tokens: [...p], mask: p.map(() => 0), logprobs: p.map(() => 0), searches: [], done: false, finish: "length" }));
  const perRow = opts.seeds !== undefined;
  const first = await engine.generate(prompts, { ...sampling, maxNewTokens: maxTurn, ...(perRow ? { seeds: opts.seeds } : { seed: opts.seed ?? 0 }) });
  let rows: GeneratedRow[] = first.rows;
  try {
    for (let turn = 1; ; turn++) {
      const appended = new Map<number, number[]>();
      let budget = maxTurn;
      rows.forEach((row, i) => {
        const s = states[i]!;
        if (s.done || row.finishReason === "idle") return;
        s.tokens.push(...row.tokens);
        s.mask.push(...row.tokens.map(() => 1));
        s.logprobs.push(...row.logprobs);
        if (row.finishReason === "stop" && row.stop === "</answer>") {
          s.done = true;
          s.finish = "answer";
          return;
        }
        if (!(row.finishReason === "stop" && row.stop === "</search>")) {
          s.done = true;
          s.finish = row.finishReason === "eos" ? "eos" : "length";
          return;
        }
        const query = parseSearch(tokenizer.decode(row.tokens));
        const searched = query !== null && s.searches.length < maxSearches;
        const block = query === null ? informationBlock(text, text.invalid) : searched ? formatInformation(text, retrieve(query, topK)) : informationBlock(text, text.limit);
        const ids = tokenizer.encode(insertion(text, block));
        const used = s.tokens.length - prompts[i]!.length;
        if (used + ids.length + 1 > maxResponse) {
          s.done = true;
          s.finish = "length";
          return;
        }
        if (searched) s.searches.push(query);
        s.tokens.push(...ids);
        s.mask.push(...ids.map(() => 0));
        s.logprobs.push(...ids.map(() => 0));
        appended.set(i, ids);
        budget = Math.min(budget, maxResponse - (used + ids.length));
      });
      if (appended.size === 0) break;
      // Per-row seeds continue each row's own stream; a batch seed gets a fresh value per turn.
      rows = await engine.resume(first.session, appended, { ...sampling, maxNewTokens: Math.max(1, budget), ...(perRow ? {} : { seed: (opts.seed ?? 0) + turn * 7919 }) });
    }
  } finally {
    await engine.release(first.session).catch(() => undefined);
  }
  return states.map((s, i) => {
    const p = prompts[i]!.length;
    return {
      promptLength: p,
      tokens: Int32Array.from(s.tokens),
      mask: Uint8Array.from(s.mask),
      logprobs: Float32Array.from(s.logprobs),
      response: tokenizer.decode(s.tokens.slice(p)),
      searches: s.searches,
      finish: s.finish,
    };
  });
}
