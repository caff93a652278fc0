import assert from "node:assert/strict";
import { test } from "node:test";
import {
  RewardError,
  emReward,
  exactMatch,
  extractAnswer,
  f1,
  f1Reward,
  normalizeAnswer,
  substringMatch,
  substringReward,
  type RewardFn,
} from "../../sdk/envs/searchr1/reward.js";

test("normalizeAnswer: lowercase, punctuation, articles, whitespace", () => {
  assert.equal(normalizeAnswer("The Eiffel Tower"), "eiffel tower");
  assert.equal(normalizeAnswer("  A  cat,   an apple; THE end. "), "cat apple end");
  assert.equal(normalizeAnswer("U.S.A.!"), "usa");
  assert.equal(normalizeAnswer("Theater and Anthem"), "theater and anthem", "articles only as whole words");
  assert.equal(normalizeAnswer("the-end"), "theend", "punctuation goes before articles, as in SQuAD");
  assert.equal(normalizeAnswer("$1,000 + 5%"), "1000 5");
  assert.equal(normalizeAnswer(""), "");
  assert.equal(normalizeAnswer("the a an"), "");
});

test("normalizeAnswer: unicode punctuation and whitespace", () => {
  assert.equal(normalizeAnswer("«Ça va»\u00a0— très\tbien…"), "ça va très bien");
  assert.equal(normalizeAnswer("Ünïcode\u3000CAFÉ"), "ünïcode café");
  assert.equal(normalizeAnswer("line\nbreak\r\nhere"), "line break here");
  assert.equal(normalizeAnswer("“Quoted” ‘text’"), "quoted text");
  assert.throws(() => normalizeAnswer(3 as unknown as string), RewardError);
});

test("extractAnswer: the last closed <answer> only", () => {
  assert.equal(extractAnswer("<think>x</think><answer>Paris</answer>"), "Paris");
  assert.equal(extractAnswer("<answer>Lyon</answer> wait <answer> Paris </answer> done"), " Paris ");
  assert.equal(extractAnswer("<answer>Lyon</answer><answer>Paris"), "Lyon", "an unclosed trailing answer does not count");
  assert.equal(extractAnswer("no tags here"), null);
  assert.equal(extractAnswer("</answer> only a close"), null);
  assert.equal(extractAnswer("<answer></answer>"), "");
  assert.equal(extractAnswer("<answer>multi\nline</answer>"), "multi\nline");
});

test("exactMatch against any gold", () => {
  assert.equal(exactMatch("the eiffel tower.", ["Eiffel Tower"]), 1);
  assert.equal(exactMatch("Eiffel", ["Eiffel Tower", "Tour Eiffel"]), 0);
  assert.equal(exactMatch("tour eiffel", ["Eiffel Tower", "Tour Eiffel"]), 1);
  assert.equal(exactMatch("anything", []), 0);
  assert.throws(() => exactMatch("x", "x" as unknown as string[]), RewardError);
  assert.throws(() => exactMatch("x", ["x", 3 as unknown as string]), /golden answer 1/);
});

test("f1: token overlap with partial credit, max over golds", () => {
  // pred {barack, obama, jr}, gold {barack, obama}: P = 2/3, R = 1 → F1 = 0.8.
  assert.ok(Math.abs(f1("Barack Obama Jr.", ["The Barack Obama"]) - 0.8) < 1e-12);
  assert.equal(f1("Obama", ["Barack Obama"]), 2 / 3);
  assert.equal(f1("nothing shared", ["Barack Obama"]), 0);
  assert.equal(f1("Obama", ["Michelle", "Obama"]), 1, "max over golds");
  assert.equal(f1("a a b", ["a b b"]), 2 / 3, "articles vanish, leaving b against b b");
  assert.equal(f1("x y y", ["y y z"]), 2 / 3, "repeated tokens count at most as often as shared");
  assert.equal(f1("the", ["an"]), 1, "both empty after normalization");
  assert.equal(f1("the", ["Paris"]), 0);
});

test("substringMatch: a normalized gold inside the normalized prediction", () => {
  assert.equal(substringMatch("It is the city of Paris, France", ["paris"]), 1);
  assert.equal(substringMatch("Lyon", ["Paris", "Lyon"]), 1);
  assert.equal(substringMatch("Paris", ["Paris, France"]), 0);
  assert.equal(substringMatch("anything", ["The"]), 0, "an empty normalized gold never matches");
});

test("rewards score the last <answer> and give 0 without one; they are swappable functions", () => {
  const response = "<think>maybe Lyon</think><answer>Lyon</answer><search>x</search><answer>The Paris</answer>";
  assert.equal(emReward(response, ["Paris"]), 1);
  assert.equal(emReward("<answer>Paris</answer><answer>Lyon</answer>", ["Paris"]), 0);
  assert.equal(emReward("Paris", ["Paris"]), 0, "no answer tag, no reward");
  assert.equal(f1Reward("<answer>Paris France</answer>", ["Paris"]), 2 / 3);
  assert.equal(substringReward("<answer>in Paris, France</answer>", ["Paris"]), 1);
  const rewards: RewardFn[] = [emReward, f1Reward, substringReward];
  assert.deepEqual(
    rewards.map((r) => r("<answer>Paris</answer>", ["paris"])),
    [1, 1, 1],
  );
  assert.throws(() => emReward("no answer", [1] as unknown as string[]), RewardError);
});
