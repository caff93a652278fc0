/**
 * The calculator environment in the layer's episode loop against a scripted
 * engine: a `<calc>` turn is answered with its value, masked; an expression
 * with no value is answered with the parser's reason and the sample goes
 * on; past the call limit the notice, with no call counted; `</answer>`
 * ends. Its reward reads the number; its warm start's demonstrations
 * show first operations (chained ones only as often as CALC_EXPLORE says),
 * with the inserted results masked and every result the parser's.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { runEpisodes } from "../../sdk/rl/episodes.js";
import { ScriptedEngine } from "../helpers/scripted-engine.js";
import { CalculatorEnvironment, calcPrompt, parseCalc, resultBlock } from "../../sdk/envs/calculator/environment.js";
import { evaluate } from "../../sdk/envs/calculator/expression.js";
import { calcReward, answerOf } from "../../sdk/envs/calculator/reward.js";
import { calcDemonstrations, prepareCalc } from "../../sdk/envs/calculator/recipe.js";
import { calculator } from "../../sdk/envs/calculator/package.js";
import { loadEnvironment } from "../../sdk/rl/environment.js";

const task = prepareCalc({ data: "synthetic", evalSize: 20 });
const tok = task.tokenizer;

const env = new CalculatorEnvironment();
const prompt = (q: string) => tok.encode(tok.chat(calcPrompt(q).system, calcPrompt(q).user));

test("two chained calls: each result is inserted masked, the answer is read and scored", async () => {
  const q = task.train.find((x) => x.category === "2 calls")!;
  const [a, b] = q.question.match(/\d+/g)!.map(Number);
  const engine = new ScriptedEngine(tok, ["</calc>", "</answer>"], [[`<calc> ${a} * ${b} </calc>`, `<calc> ${a! * b!} - 11 </calc>`, `<answer> ${a! * b! - 11} </answer>`]]);
  const [e] = await runEpisodes(engine, tok, env, [{ prompt: prompt(q.question), state: null, label: `${q.id}#0` }], { maxToolCalls: 4 });
  assert.equal(e!.finish, "answer");
  assert.deepEqual(e!.calls, [`${a} * ${b}`, `${a! * b!} - 11`]);
  // The mask: 0 on the prompt and on each inserted result block, 1 on what the policy wrote.
  const p = prompt(q.question).length;
  const parts = [
    [tok.encode(`<calc> ${a} * ${b} </calc>`), 1],
    [tok.encode(resultBlock(String(a! * b!))), 0],
    [tok.encode(`<calc> ${a! * b!} - 11 </calc>`), 1],
    [tok.encode(resultBlock(String(a! * b! - 11))), 0],
    [tok.encode(`<answer> ${a! * b! - 11} </answer>`), 1],
  ] as const;
  assert.deepEqual([...e!.mask.slice(p)], parts.flatMap(([ids, bit]) => ids.map(() => bit)));
  assert.equal(answerOf(e!.response), String(a! * b! - 11));
  assert.equal(calcReward(e!.response, [String(a! * b! - 11)]), 1);
  assert.equal(calcReward(e!.response, [String(a! * b!)]), 0);
});

test("an expression with no value is answered with why, uncounted as a result; past the limit the notice; no expression is an error block", async () => {
  const engine = new ScriptedEngine(tok, ["</calc>", "</answer>"], [
    ["<calc> 7 / 0 </calc>", "<calc> 12 * 3 </calc>", "<calc> 1 + 1 </calc>", "<answer> 36 </answer>"],
    ["<calc> </calc>", "<answer> 5 </answer>"],
  ]);
  const p = prompt("a crate holds 12 boxes of 3 apples . how many apples are in the crate ?");
  const [a, b] = await runEpisodes(engine, tok, env, [{ prompt: p, state: null, label: "q#0" }, { prompt: p, state: null, label: "q#1" }], { maxToolCalls: 2 });
  assert.deepEqual(a!.calls, ["7 / 0", "12 * 3"], "a failed expression is still a call; the third is past the limit");
  assert.match(a!.response, /<result> error : division by zero at 3 <\/result>/);
  assert.match(a!.response, /<result> 36 <\/result>/);
  assert.match(a!.response, /<result> no more calculations : give the answer now ?\. <\/result>/);
  assert.equal(a!.finish, "answer");
  assert.deepEqual(b!.calls, []);
  assert.match(b!.response, /<result> error : write an expression inside <calc> <\/calc> ?\. <\/result>/);
  assert.equal(parseCalc("x <calc> 1 + 2 </calc>"), "1 + 2");
  assert.equal(parseCalc("<calc> 1 </calc> then <calc> 2 * 3 </calc>"), "2 * 3");
  assert.equal(parseCalc("nothing"), null);
  assert.equal(calcReward("<answer> 0036 </answer>", ["36"]), 1, "the same number");
  assert.equal(calcReward("<answer> 36 apples </answer>", ["36"]), 0, "not a number");
  assert.equal(calcReward("no answer", ["36"]), 0);
});

test("the protocol's every word is one token of the vocabulary, numbers to 9,999 included", () => {
  const unk = tok.encode("[UNK]")[0];
  for (const text of [calcPrompt(task.train[0]!.question).system, calcPrompt(task.heldOut[0]!.question).user, resultBlock("9999"), "<calc> 37 * 48 - 219 / 7 </calc> <answer> 1 </answer>"]) {
    const ids = tok.encode(text);
    assert.ok(!ids.includes(unk!), `no unknown word in: ${text}`);
  }
  assert.equal(tok.encode("<calc>").length, 1, "tags are single tokens");
  assert.equal(tok.encode("1776").length, 1, "a number is one token");
});

test("demonstrations: first operations, chains as rarely as CALC_EXPLORE says, results the parser's and masked", () => {
  const demos = calcDemonstrations(task.extra.train, tok, 400, 5, [0.25, 0.5]);
  let chained = 0;
  for (const d of demos) {
    const text = tok.decode(d.tokens);
    const calls = [...text.matchAll(/<calc> ([^<]*) <\/calc> <result> (\d+) <\/result>/g)];
    assert.ok(calls.length >= 1, "every demonstration calculates");
    for (const c of calls) assert.equal(Number(c[2]), evaluate(c[1]!), "the result is the parser's");
    for (const c of calls) assert.match(c[1]!, /^\d+ [*/-] \d+$/, "one operation per call");
    if (calls.length > 1) chained++;
    // The result blocks are masked, the calls and the answer trained.
    const trained = tok.decode(d.tokens.filter((_, k) => d.mask[k] === 1));
    assert.doesNotMatch(trained, /<result>/);
    assert.match(trained, /<answer> \d+ <\/answer>$/);
  }
  // With explore 0.25 after the first call, about a quarter of multi-call questions (5/6 of them) chain.
  assert.ok(chained > 400 * (5 / 6) * 0.15 && chained < 400 * (5 / 6) * 0.4, `chained ${chained} of 400`);
  assert.equal(calcDemonstrations(task.extra.train, tok, 50, 9, [0, 0]).filter((d) => (tok.decode(d.tokens).match(/<result> \d+ <\/result>/g) ?? []).length > 1).length, 0, "explore 0 shows no chain");
});

test("the package: its recipe serves the tiny preset, its environment loads from its module", async () => {
  assert.equal(calculator.recipeFor("tiny", "synthetic").name, "tiny-calc");
  assert.throws(() => calculator.recipeFor("/models/qwen", "synthetic"), /the calculator environment trains the tiny preset/);
  const spec = task.environment.spec;
  const loaded = await loadEnvironment(spec, (m) => import(m));
  assert.equal(loaded.name, "calculator");
  assert.deepEqual(task.heldOut.map((q) => q.category).filter((c, i, a) => a.indexOf(c) === i).sort(), ["1 call", "2 calls", "3 calls"]);
});
