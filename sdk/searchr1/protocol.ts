/**
 * The Search-R1 interaction protocol. The policy reasons in <think>, asks
 * <search>query</search>, reads the passages we append inside
 * <information>…</information>, and ends with <answer>…</answer>. Generation
 * stops at `</search>` or `</answer>`; a search is answered from the local
 * retriever and generation resumes on the same KV cache. Every token carries
 * a mask bit: 1 for what the policy generated (trained), 0 for the prompt and
 * everything we inserted (retrieved passages, corrective messages).
 */
import type { TensorEngine } from "../tensor/index.js";
import type { GeneratedRow } from "../tensor/types.js";
import type { TextTokenizer } from "./tokenizer.js";

/** The instruction, in our own words. */
export const INSTRUCTION =
  "answer the question . you can search : write <search> words </search> and the results come back inside <information> </information> . " +
  "think inside <think> </think> . give the final answer inside <answer> </answer> .";

/** Inserted when the policy stopped at </search> without a usable query. */
export const INVALID_MESSAGE = "<information> invalid action : search with <search> words </search> or answer with <answer> words </answer> . </information>";
/** Inserted when the policy searches past the limit. */
export const LIMIT_MESSAGE = "<information> no more searches : give the answer now . </information>";
/** Inserted when a search finds nothing. */
export const EMPTY_MESSAGE = "<information> no results . </information>";

/** Strings generation stops at. */
export const STOP_STRINGS = ["</search>", "</answer>"];

/** Every word the protocol itself writes (the word-level vocabulary needs them). */
export const PROTOCOL_WORDS = [
  ...new Set(
    [INSTRUCTION, INVALID_MESSAGE, LIMIT_MESSAGE, EMPTY_MESSAGE, "question :", "( 1 ) ( 2 ) ( 3 ) ( 4 ) ( 5 ) ( 6 ) ( 7 ) ( 8 ) ( 9 ) ( 10 )", "i should search i know the answer found it"]
      .join(" ")
      .split(/\s+/)
      .filter((w) => w !== "" && !w.startsWith("<")),
  ),
];

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
  seed?: number;
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
  /** How it ended: answered, truncated by a limit, or the model stopped otherwise. */
  finish: "answer" | "length" | "eos";
}

/** Renders the prompt for a question with the tokenizer's chat template (plain text without one). */
export function buildPrompt(tokenizer: TextTokenizer, question: string): string {
  return tokenizer.chat(INSTRUCTION, `question : ${question}`);
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

/** The information block for a set of hits. */
export function formatInformation(hits: Hit[]): string {
  if (hits.length === 0) return EMPTY_MESSAGE;
  return `<information> ${hits.map((h, i) => `( ${i + 1} ) ${h.title} : ${h.text}`).join(" ")} </information>`;
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
  retrieve: Retrieve,
  prompts: number[][],
  opts: ProtocolOptions = {},
): Promise<Episode[]> {
  const maxSearches = opts.maxSearches ?? 4;
  const topK = opts.topK ?? 3;
  const maxTurn = opts.maxTurnTokens ?? 64;
  const maxResponse = opts.maxResponseTokens ?? 320;
  const sampling = { temperature: opts.temperature ?? 1, topP: opts.topP ?? 1, stop: STOP_STRINGS };
  const states: RowState[] = prompts.map((p) => ({ tokens: [...p], mask: p.map(() => 0), logprobs: p.map(() => 0), searches: [], done: false, finish: "length" }));
  const first = await engine.generate(prompts, { ...sampling, maxNewTokens: maxTurn, seed: opts.seed ?? 0 });
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
        const info = query === null ? INVALID_MESSAGE : searched ? formatInformation(retrieve(query, topK)) : LIMIT_MESSAGE;
        const ids = tokenizer.encode(` ${info} `);
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
      rows = await engine.resume(first.session, appended, { ...sampling, maxNewTokens: Math.max(1, budget), seed: (opts.seed ?? 0) + turn * 7919 });
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
