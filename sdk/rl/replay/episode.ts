/**
 * A replayed episode as data: every token with where it came from (prompt,
 * generated, inserted observation, forced by a what-if), its probability,
 * entropy and top-k alternatives, and the turns it falls into. The same
 * JSON serves a notebook view, a terminal view and `hearth replay --json`
 * (views.ts), whether the run is driven here or lives on the cluster. What-if
 * branches and version comparisons are built from it.
 */
import type { TextTokenizer } from "../text/tokenizer.js";
import type { Replayed } from "./replay.js";

/** Where a token came from. */
export type TokenKind = "prompt" | "generated" | "observation" | "forced";

/** One token of a replayed episode. */
export interface TokenRow {
  /** Its position in the episode. */
  i: number;
  /** The generated turn it belongs to or follows (-1 for the prompt). */
  turn: number;
  kind: TokenKind;
  id: number;
  text: string;
  /** Generated tokens: the sampler's logprob, its probability, the distribution's entropy (nats) and the top-k alternatives (most likely first). */
  logprob?: number;
  p?: number;
  entropy?: number;
  top?: Array<{ id: number; text: string; p: number }>;
}

/** A replayed episode (what `toJSON` gives and the views draw). */
export interface ReplayJSON {
  step: number;
  sample: number;
  itemId: string;
  question: string;
  golds: string[];
  /** The policy version replayed, and the one the sample was sampled with. */
  version: number;
  sampledWith: number;
  /** Every token and logprob was checked equal to the recording. */
  matched: boolean;
  reward: number;
  answer: string | null;
  finish: string;
  tokens: TokenRow[];
  /** How many generated turns. */
  turns: number;
  seconds: number;
  loadSeconds: number;
}

/**
 * Each token's text as it reads in its context: what decoding it adds to the
 * tokens before it (a word-piece tokenizer's spaces, a byte-level one's split
 * characters), from a window of the previous few.
 */
export function tokenTexts(ids: ArrayLike<number>, tok: Pick<TextTokenizer, "decode">, window = 6): string[] {
  const out: string[] = [];
  for (let i = 0; i < ids.length; i++) {
    const from = Math.max(0, i - window);
    const before = i === from ? "" : tok.decode(Array.prototype.slice.call(ids, from, i) as number[]);
    const upto = tok.decode(Array.prototype.slice.call(ids, from, i + 1) as number[]);
    out.push(upto.startsWith(before) ? upto.slice(before.length) : tok.decode([ids[i]!]));
  }
  return out;
}

/** The token rows of a replay (see TokenRow). */
export function tokenRows(r: Pick<Replayed, "tokens" | "mask" | "logprobs" | "alternatives"> & { promptLength: number }, tok: Pick<TextTokenizer, "decode">, forced?: { at: number; n: number }): TokenRow[] {
  const rows: TokenRow[] = [];
  const texts = tokenTexts(r.tokens, tok);
  let turn = -1;
  for (let i = 0; i < r.tokens.length; i++) {
    const id = r.tokens[i]!;
    const kind: TokenKind = forced && i >= forced.at && i < forced.at + forced.n ? "forced" : i < r.promptLength ? "prompt" : r.mask[i] === 1 ? "generated" : "observation";
    if (kind === "generated" && (i === 0 || r.mask[i - 1] !== 1 || rows[i - 1]?.kind === "forced")) turn++;
    const row: TokenRow = { i, turn, kind, id, text: texts[i]! };
    if (kind === "generated") {
      const lp = r.logprobs[i]!;
      row.logprob = lp;
      row.p = Math.exp(lp);
      const a = r.alternatives[i];
      if (a) {
        row.entropy = a.entropy;
        row.top = Array.from(a.ids, (t, k) => ({ id: t, text: tok.decode([t]), p: Math.exp(a.logprobs[k]!) }));
      }
    }
    rows.push(row);
  }
  return rows;
}

/** [start, end) of generated turn `k` in `rows` (a clear error for a turn the episode does not have). */
export function turnSpan(rows: readonly TokenRow[], k: number): [number, number] {
  const inTurn = rows.filter((r) => r.kind === "generated" && r.turn === k);
  const turns = new Set(rows.filter((r) => r.kind === "generated").map((r) => r.turn)).size;
  if (inTurn.length === 0) throw new RangeError(`turn ${k}: this episode has generated turns 0–${turns - 1}`);
  return [inTurn[0]!.i, inTurn.at(-1)!.i + 1];
}

/** Where two token lists first differ from `from` on (undefined: equal). */
export function divergence(a: ArrayLike<number>, b: ArrayLike<number>, from = 0): number | undefined {
  const n = Math.max(a.length, b.length);
  for (let i = from; i < n; i++) if (a[i] !== b[i]) return i;
  return undefined;
}
