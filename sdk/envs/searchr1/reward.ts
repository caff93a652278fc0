/**
 * Rewards for Search-R1 responses: SQuAD answer normalization, extraction of
 * the response's last `<answer>…</answer>`, and exact match, token F1 and
 * substring match against a list of golden answers.
 *
 * A reward is a plain function `(response, golds) => number`, so the driver
 * can swap it between steps:
 *
 * ```ts
 * import { emReward, f1Reward } from "./reward.js";
 * let reward: RewardFn = emReward;
 * reward("<think>…</think><answer>The Eiffel Tower</answer>", ["Eiffel Tower"]); // 1
 * reward = f1Reward; // partial credit from here on
 * ```
 *
 * Normalization follows the SQuAD v1.1 evaluation script, which the reference
 * Search-R1 reward uses: lowercase, remove punctuation, remove the articles
 * a/an/the as whole words, collapse whitespace. We treat every Unicode
 * punctuation character (`\p{P}`) and symbol (`\p{S}`) as punctuation, where
 * SQuAD removes ASCII `string.punctuation` only; on ASCII text the two agree
 * (Unicode files ASCII $ + < = > ^ | ~ and the backtick under symbols). Unicode
 * whitespace (no-break space, ideographic space, …) collapses like ASCII spaces.
 */
import { RewardError } from "../../rl/errors.js";
import type { RewardFn } from "../../rl/types.js";

export { RewardError, type RewardFn };

const PUNCTUATION = /[\p{P}\p{S}]/gu;
const ARTICLES = /(?<![\p{L}\p{N}])(?:a|an|the)(?![\p{L}\p{N}])/gu;
const WHITESPACE = /\s+/gu;

/**
 * SQuAD answer normalization: lowercase, strip punctuation, drop the articles
 * a/an/the, collapse whitespace and trim. `"The  U.S.A.!"` → `"usa"`.
 */
export function normalizeAnswer(text: string): string {
  if (typeof text !== "string") throw new RewardError(`normalizeAnswer expects a string, got ${describe(text)}`);
  // Same order as SQuAD: lower → remove punctuation → remove articles → fix whitespace.
  return text
    .toLowerCase()
    .replace(PUNCTUATION, "")
    .replace(ARTICLES, " ")
    .replace(WHITESPACE, " ")
    .trim();
}

/**
 * The content of the last `<answer>…</answer>` in `response`, untrimmed, or
 * null when the response has no closed answer tag. Earlier answers are
 * ignored: a policy may draft and revise, and only its final word counts.
 * An unclosed trailing `<answer>` does not count.
 */
export function extractAnswer(response: string): string | null {
  if (typeof response !== "string") throw new RewardError(`extractAnswer expects a string, got ${describe(response)}`);
  const close = response.lastIndexOf("</answer>");
  if (close < 0) return null;
  const open = response.lastIndexOf("<answer>", close);
  if (open < 0) return null;
  return response.slice(open + "<answer>".length, close);
}

/** 1 when the normalized prediction equals some normalized gold, else 0. */
export function exactMatch(prediction: string, golds: readonly string[]): number {
  checkGolds(golds);
  const p = normalizeAnswer(prediction);
  return golds.some((g) => normalizeAnswer(g) === p) ? 1 : 0;
}

/**
 * 1 when some normalized gold occurs inside the normalized prediction (the
 * reference's "subem" check), else 0. An empty normalized gold never matches,
 * so a gold of only punctuation or articles cannot reward every answer.
 */
export function substringMatch(prediction: string, golds: readonly string[]): number {
  checkGolds(golds);
  const p = normalizeAnswer(prediction);
  return golds.some((g) => {
    const n = normalizeAnswer(g);
    return n.length > 0 && p.includes(n);
  })
    ? 1
    : 0;
}

/**
 * SQuAD token-level F1, the maximum over golds: tokens are the normalized
 * text split on spaces, overlap counts each shared token at most as often as
 * it occurs in both. Two empty token lists score 1; one empty side scores 0.
 */
export function f1(prediction: string, golds: readonly string[]): number {
  checkGolds(golds);
  const predTokens = tokens(prediction);
  let best = 0;
  for (const g of golds) best = Math.max(best, tokenF1(predTokens, tokens(g)));
  return best;
}

/** Exact match of the last `<answer>`; 0 when the response has none. The default Search-R1 reward. */
export const emReward: RewardFn = (response, golds) => {
  const answer = extractAnswer(response);
  return answer === null ? (checkGolds(golds), 0) : exactMatch(answer, golds);
};

/** Token F1 of the last `<answer>`; 0 when the response has none. */
export const f1Reward: RewardFn = (response, golds) => {
  const answer = extractAnswer(response);
  return answer === null ? (checkGolds(golds), 0) : f1(answer, golds);
};

/** Substring match of the last `<answer>`; 0 when the response has none. */
export const substringReward: RewardFn = (response, golds) => {
  const answer = extractAnswer(response);
  return answer === null ? (checkGolds(golds), 0) : substringMatch(answer, golds);
};

function tokens(text: string): string[] {
  const n = normalizeAnswer(text);
  return n === "" ? [] : n.split(" ");
}

function tokenF1(pred: string[], gold: string[]): number {
  if (pred.length === 0 || gold.length === 0) return pred.length === gold.length ? 1 : 0;
  const counts = new Map<string, number>();
  for (const t of gold) counts.set(t, (counts.get(t) ?? 0) + 1);
  let common = 0;
  for (const t of pred) {
    const c = counts.get(t) ?? 0;
    if (c > 0) {
      common++;
      counts.set(t, c - 1);
    }
  }
  if (common === 0) return 0;
  const precision = common / pred.length;
  const recall = common / gold.length;
  return (2 * precision * recall) / (precision + recall);
}

function checkGolds(golds: readonly string[]): void {
  if (!Array.isArray(golds)) throw new RewardError(`golden answers must be an array of strings, got ${describe(golds)}`);
  for (let i = 0; i < golds.length; i++) {
    if (typeof golds[i] !== "string") throw new RewardError(`golden answer ${i} is ${describe(golds[i])}, not a string`);
  }
}

function describe(value: unknown): string {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}
