/**
 * The calculator task: every question's solution path is one-operation calls
 * whose results the tool gives exactly, the last one its answer; kinds in
 * their weights; every number a word of the vocabulary; held-out questions
 * multiply pairs of numbers no training question does.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { evaluate } from "../../sdk/envs/calculator/expression.js";
import { CALLS_OF, MAX_NUMBER, calcTask } from "../../sdk/envs/calculator/task.js";

test("solution paths are exact one-operation calls, in the kinds' weights, within the vocabulary", () => {
  const t = calcTask({ seed: 1 });
  const words = new Set(t.words);
  const count: Record<string, number> = {};
  for (const q of [...t.train, ...t.heldOut]) {
    count[q.kind] = (count[q.kind] ?? 0) + (t.train.includes(q) ? 1 : 0);
    assert.equal(q.calls.length, CALLS_OF[q.kind]);
    for (const c of q.calls) {
      assert.equal(evaluate(c.expression), c.result, `${q.id}: ${c.expression}`);
      assert.ok(Number.isInteger(c.result) && c.result >= 0 && c.result <= MAX_NUMBER, `${q.id}: ${c.result} in range`);
      assert.equal(c.expression.split(" ").filter((w) => /^[-+*/]$/.test(w)).length, 1, "one operation per call");
      for (const w of c.expression.split(" ")) assert.ok(words.has(w), `${w} is a word`);
      assert.ok(words.has(String(c.result)));
    }
    for (let i = 1; i < q.calls.length; i++) assert.ok(q.calls[i]!.expression.startsWith(`${q.calls[i - 1]!.result} `), `${q.id}: call ${i + 1} uses the result of call ${i}`);
    assert.deepEqual(q.golds, [String(q.calls.at(-1)!.result)]);
    for (const w of q.question.split(" ")) assert.ok(words.has(w));
  }
  assert.deepEqual(count, { mul: 400, "mul-sub": 800, "mul-sub-div": 1200 });
  assert.equal(t.heldOut.length, 200);
  const pair = (e: string) => e.split(" * ").map(Number).sort((a, b) => a - b).join("x");
  const trainPairs = new Set(t.train.map((q) => pair(q.calls[0]!.expression)));
  for (const q of t.heldOut) assert.ok(!trainPairs.has(pair(q.calls[0]!.expression)), `${q.id}: a pair no training question multiplies`);
  assert.deepEqual(calcTask({ seed: 1 }).train.slice(0, 5), t.train.slice(0, 5), "the same task for the same seed");
});
