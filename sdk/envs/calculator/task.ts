/**
 * The calculator task: word problems whose answers need one, two or three
 * operations on numbers a tiny policy cannot work out in its head (37 × 48),
 * so it must call the calculator, read the result, and call again with it.
 * Every number is one word of the vocabulary (0–9999, results included), so
 * a policy copies a number from the question into a call, and from a result
 * into the next call or the answer, as the chain task's policy copies names.
 *
 *   mul          "a crate holds 37 boxes of 48 apples . how many apples are in the crate ?"   37 * 48
 *   mul-sub      "… 219 apples are sold . how many apples are left ?"                          then − 219
 *   mul-sub-div  "… the rest is shared by 7 shops . how many apples does each shop get ?"      then ÷ 7
 *
 * Each question carries its solution path (the one-operation calls and their
 * results), which the warm start demonstrates only in part. Held-out
 * questions use number pairs no training question uses.
 */
import { createHash } from "node:crypto";

/** A calculator question. */
export interface CalcQuestion {
  id: string;
  question: string;
  /** The answer as the policy must write it. */
  golds: string[];
  kind: CalcKind;
  /** The solution path: one-operation expressions and their results; the last result is the answer. */
  calls: Array<{ expression: string; result: number }>;
}

/** The kinds of question, by the operations they chain. */
export type CalcKind = "mul" | "mul-sub" | "mul-sub-div";

/** Operations each kind needs. */
export const CALLS_OF: Record<CalcKind, number> = { mul: 1, "mul-sub": 2, "mul-sub-div": 3 };

/** How often each kind is drawn: one in six questions needs one call, two need two, three need three. */
export const KIND_WEIGHTS: ReadonlyArray<[CalcKind, number]> = [
  ["mul", 1],
  ["mul-sub", 2],
  ["mul-sub-div", 3],
];

/** Containers and things (singular, plural): one more thing each question can be about. */
const THINGS: ReadonlyArray<[string, string, string]> = [
  ["crate", "boxes", "apples"],
  ["truck", "crates", "melons"],
  ["shelf", "rows", "books"],
  ["barn", "sacks", "potatoes"],
  ["ship", "containers", "bottles"],
  ["hall", "tables", "cups"],
];

/** The largest number of the vocabulary: every operand and result stays at or below it. */
export const MAX_NUMBER = 9999;

/** A generated task. */
export interface CalcTask {
  train: CalcQuestion[];
  heldOut: CalcQuestion[];
  /** Every word the task can produce, numbers included (for a word-level vocabulary). */
  words: string[];
}

/** A small deterministic generator (the same task on every machine for the same seed). */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 0x100000000;
  };
}

const int = (r: () => number, lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1));

/** The question of `kind` about `a` boxes of `b` things (and, past one call, `c` sold and `d` shops). */
function makeQuestion(kind: CalcKind, thing: readonly [string, string, string], a: number, b: number, c: number, d: number, id: string): CalcQuestion {
  const [box, boxes, items] = thing;
  const total = a * b;
  const calls = [{ expression: `${a} * ${b}`, result: total }];
  let q = `a ${box} holds ${a} ${boxes} of ${b} ${items} .`;
  if (kind === "mul") q += ` how many ${items} are in the ${box} ?`;
  else {
    q += ` ${c} ${items} are sold .`;
    calls.push({ expression: `${total} - ${c}`, result: total - c });
    if (kind === "mul-sub") q += ` how many ${items} are left ?`;
    else {
      q += ` the rest is shared by ${d} shops . how many ${items} does each shop get ?`;
      calls.push({ expression: `${total - c} / ${d}`, result: (total - c) / d });
    }
  }
  return { id, question: q, golds: [String(calls.at(-1)!.result)], kind, calls };
}

/** Options of the generator. */
export interface CalcOptions {
  seed?: number;
  /** Training questions per kind weight unit (default 400: 2,400 questions). */
  perWeight?: number;
  /** Held-out questions (default 200). */
  heldOut?: number;
}

/** Generates the task. Held-out questions multiply number pairs that no training question does. */
export function calcTask(opts: CalcOptions = {}): CalcTask {
  const r = rng(opts.seed ?? 1);
  const per = opts.perWeight ?? 400;
  const nHeld = opts.heldOut ?? 200;
  // A pair of factors belongs to the training or to the held-out side by a hash of it, so the split is fixed.
  const heldPair = (a: number, b: number) => createHash("sha256").update(`${Math.min(a, b)}x${Math.max(a, b)}`).digest()[0]! < 26;
  const draw = (kind: CalcKind, held: boolean, i: number): CalcQuestion => {
    for (;;) {
      const a = int(r, 12, 99);
      const b = int(r, 12, 99);
      if (heldPair(a, b) !== held) continue;
      const total = a * b;
      const d = int(r, 3, 9);
      // What is sold leaves a rest the shops share exactly.
      let c = int(r, 11, Math.min(999, total - d));
      if (kind === "mul-sub-div") c -= (total - c) % d === 0 ? 0 : d - ((total - c) % d);
      if (c < 11 || c >= total) continue;
      const thing = THINGS[Math.floor(r() * THINGS.length)]!;
      return makeQuestion(kind, thing, a, b, c, d, `${held ? "held" : "train"}-${kind}-${i}`);
    }
  };
  const kinds = KIND_WEIGHTS.flatMap(([k, n]) => Array.from({ length: n }, () => k));
  const train: CalcQuestion[] = [];
  for (let i = 0; i < per; i++) for (const k of kinds) train.push(draw(k, false, train.length));
  const heldOut = Array.from({ length: nHeld }, (_, i) => draw(kinds[i % kinds.length]!, true, i));
  const words = new Set<string>();
  for (let n = 0; n <= MAX_NUMBER; n++) words.add(String(n));
  for (const q of [...train, ...heldOut]) for (const w of q.question.split(" ")) words.add(w);
  for (const w of ["*", "-", "/", "+"]) words.add(w);
  return { train, heldOut, words: [...words].sort() };
}
