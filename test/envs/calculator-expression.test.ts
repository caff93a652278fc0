/**
 * The calculator's parser: exact integer arithmetic with precedence,
 * parentheses and unary minus, against an independent reference (BigInt on
 * random expressions); and every malformed, oversized or inexact expression
 * refused with a message that says what is wrong (what the tool answers).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ExpressionError, MAX_DEPTH, MAX_LENGTH, evaluate } from "../../sdk/envs/calculator/expression.js";

test("precedence, parentheses, unary minus and the operator spellings", () => {
  assert.equal(evaluate("37 * 48"), 1776);
  assert.equal(evaluate("2 + 3 * 4"), 14);
  assert.equal(evaluate("(2 + 3) * 4"), 20);
  assert.equal(evaluate("100 - 20 - 30"), 50, "left to right");
  assert.equal(evaluate("120 / 4 / 3"), 10);
  assert.equal(evaluate("-3 * -(2 + 1)"), 9);
  assert.equal(evaluate("6 x 7"), 42);
  assert.equal(evaluate("6 × 7 ÷ 3 − 1"), 13);
  assert.equal(evaluate("  12  "), 12);
  assert.equal(evaluate("5 - 5 * 1"), 0);
});

test("random expressions agree with a BigInt reference", () => {
  let seed = 42;
  const r = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const gen = (depth: number): { text: string; value: bigint } => {
    if (depth > 3 || r() < 0.3) {
      const n = BigInt(Math.floor(r() * 1000));
      return { text: String(n), value: n };
    }
    const a = gen(depth + 1);
    const b = gen(depth + 1);
    const op = ["+", "-", "*"][Math.floor(r() * 3)]!;
    const value = op === "+" ? a.value + b.value : op === "-" ? a.value - b.value : a.value * b.value;
    return { text: `( ${a.text} ${op} ${b.text} )`, value };
  };
  for (let i = 0; i < 500; i++) {
    const e = gen(0);
    if (e.text.length > MAX_LENGTH) continue;
    const big = e.value < 0n ? -e.value : e.value;
    if (big > 10n ** 12n) assert.throws(() => evaluate(e.text), ExpressionError);
    else assert.equal(evaluate(e.text), Number(e.value), e.text);
  }
});

test("every bad expression is a clear ExpressionError, never a crash", () => {
  const cases: Array<[string, RegExp]> = [
    ["", /empty expression/],
    ["   ", /empty expression/],
    ["2 +", /ends where a number is expected/],
    ["2 ** 3", /unexpected '\*' at 4/],
    ["(2 + 3", /missing '\)' for the '\(' at 1/],
    ["2 + 3)", /unexpected '\)' at 6/],
    ["2 3", /unexpected number 3 at 3/],
    ["7 / 2", /7 \/ 2 is not a whole number/],
    ["7 / (3 - 3)", /division by zero at 3/],
    ["alert(1)", /unexpected 'a' at 1: only numbers/],
    ["2.5 * 2", /unexpected '\.' at 2/],
    ["1234567890 * 2", /number too long at 1/],
    ["999999999 * 999999999", /result too large/],
    ["1".repeat(MAX_LENGTH + 1), /too long: 201 characters/],
    [`${"(".repeat(MAX_DEPTH + 1)}1${")".repeat(MAX_DEPTH + 1)}`, /too deeply nested/],
  ];
  for (const [text, pattern] of cases) {
    assert.throws(() => evaluate(text), (e: unknown) => e instanceof ExpressionError && pattern.test(e.message), `${JSON.stringify(text)} → ${pattern}`);
  }
  assert.equal(evaluate(`${"(".repeat(MAX_DEPTH)}1${")".repeat(MAX_DEPTH)}`), 1, "nesting up to the limit is fine");
});
