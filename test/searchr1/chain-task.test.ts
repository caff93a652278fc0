/**
 * The embedded default's task (chain-task.ts) on its own, with the world the
 * recipe uses: every question kind needs the number of searches it claims,
 * each hop's query is the previous hop's answer and its passage is found by
 * that search (top 3, the protocol's default) and states the next name;
 * held-out people appear in no training question; searches for a city or a
 * country return distractors that share the name; the kinds come in the
 * documented proportions; the world is the same on every call; and an
 * evaluation's EM is broken down by the questions' hop counts.
 */
import assert from "node:assert/strict";
import { emReward } from "../../sdk/envs/searchr1/reward.js";
import { test } from "node:test";
import { Bm25Index } from "../../sdk/envs/searchr1/retrieval/bm25.js";
import { chainTask, hopCategory, PERSON_KIND_WEIGHTS, type ChainKind, type ChainQuestion } from "../../sdk/envs/searchr1/tasks/chain-task.js";
import type { ScoredSample } from "../../sdk/rl/scoring/batch.js";
import { layerOptions } from "../../sdk/rl/run/options.js";
import { emByCategory, evalByCategory } from "../../sdk/rl/run/pipeline.js";
import { chainRecipe, prepareChain } from "../../sdk/envs/searchr1/recipes/chain.js";

/** The recipe's world (recipes/chain.ts): prepareChain builds the task from it. */
const task = prepareChain(layerOptions(chainRecipe.defaults, { evalSize: 200 }));
const world = chainTask({ seed: 1, people: 1200, heldOut: 200 });
const index = Bm25Index.build(world.corpus);
const TOP_K = 3;

/** Searches each kind needs, written out independently of the generator. */
const HOPS: Record<ChainKind, number> = { born: 1, country: 2, continent: 3, "city-country": 1, "country-continent": 1 };

const byTitle = new Map(world.corpus.map((p) => [p.title, p]));

test("the recipe prepares exactly this world: the same questions and passages", () => {
  assert.deepEqual(task.train, world.train);
  assert.deepEqual(task.heldOut, world.heldOut);
  assert.deepEqual(task.corpus, world.corpus);
  assert.deepEqual(chainTask({ seed: 1, people: 1200, heldOut: 200 }), world, "the same world on every call");
});

test("every question needs the searches its kind says: each hop searches the last answer, finds its passage in the top 3, and reads the next name there", () => {
  const all: ChainQuestion[] = [...world.train, ...world.heldOut, ...world.entityQuestions];
  // Training repeats a person's multi-hop questions to weight the kinds (the same id is the same question); the rest are unique.
  assert.equal(new Set([...world.heldOut, ...world.entityQuestions].map((q) => q.id)).size, world.heldOut.length + world.entityQuestions.length, "held-out and entity question ids are unique");
  const first = new Map<string, ChainQuestion>();
  for (const q of world.train) {
    const seen = first.get(q.id);
    if (seen) assert.deepEqual(q, seen, `${q.id}: a repeated id is the same question`);
    else first.set(q.id, q);
  }
  for (const q of all) {
    assert.equal(q.hops.length, HOPS[q.chainKind], `${q.id}: a ${q.chainKind} question needs ${HOPS[q.chainKind]} search(es)`);
    assert.equal(q.category, hopCategory(q.hops.length), `${q.id}: its category is its hop count`);
    assert.equal(q.hops[0]!.query, q.entity, `${q.id}: the first search is the entity asked about`);
    assert.ok(q.question.endsWith(` of ${q.entity} ?`), `${q.id}: the entity ends the question (${q.question})`);
    assert.deepEqual(q.golds, [q.hops.at(-1)!.found], `${q.id}: the gold is the last hop's name`);
    q.hops.forEach((h, k) => {
      if (k > 0) assert.equal(h.query, q.hops[k - 1]!.found, `${q.id}: hop ${k + 1} searches what hop ${k} read`);
      const passage = byTitle.get(h.query);
      assert.ok(passage, `${q.id}: a passage about ${h.query}`);
      assert.match(passage.text, new RegExp(`^${h.query} (was born|is a city|is a country) in ${h.found} \\.`), `${q.id}: ${h.query}'s passage states ${h.found}`);
      assert.ok(index.search(h.query, TOP_K).some((hit) => hit.title === h.query), `${q.id}: searching ${h.query} finds its passage in the top ${TOP_K}`);
    });
  }
  assert.deepEqual(hopCategory(1), "1 hop");
  assert.deepEqual(hopCategory(3), "3 hops");
});

test("the kinds come in the documented proportions: 1 in 6 questions needs one search, 2 two, 3 three (training and held-out)", () => {
  const count = (qs: ChainQuestion[], kind: ChainKind) => qs.filter((q) => q.chainKind === kind).length;
  const total = PERSON_KIND_WEIGHTS.reduce((n, [, w]) => n + w, 0);
  assert.deepEqual(PERSON_KIND_WEIGHTS.map(([k, w]) => [k, w]), [["born", 1], ["country", 2], ["continent", 3]]);
  assert.equal(world.train.length, 1000 * total, "each of the 1,000 training people is asked every kind, by weight");
  for (const [kind, w] of PERSON_KIND_WEIGHTS) {
    assert.equal(count(world.train, kind), 1000 * w, `training ${kind}`);
    assert.ok(Math.abs(count(world.heldOut, kind) - (200 * w) / total) <= 1, `held-out ${kind}: ${count(world.heldOut, kind)} of 200`);
  }
  assert.equal(world.heldOut.length, 200, "one question per held-out person");
  assert.deepEqual([...new Set(world.entityQuestions.map((q) => q.chainKind))].sort(), ["city-country", "country-continent"], "the warm start's entity questions are single searches about places");
});

test("held-out people appear in no training question, and every training person in no held-out one", () => {
  const heldOut = new Set(world.heldOut.map((q) => q.entity!));
  const trained = new Set(world.train.map((q) => q.entity!));
  assert.equal(heldOut.size, 200, "200 held-out people");
  assert.equal(trained.size, 1000);
  for (const q of [...world.train, ...world.entityQuestions]) {
    for (const word of q.question.split(" ")) assert.ok(!heldOut.has(word), `${q.id} (${q.question}) names held-out person ${word}`);
    for (const h of q.hops) assert.ok(!heldOut.has(h.query) && !heldOut.has(h.found), `${q.id}'s solution path touches held-out person ${h.query}`);
  }
  for (const q of world.heldOut) assert.ok(!trained.has(q.entity!), `held-out ${q.id} asks about training person ${q.entity}`);
  // Still answerable: each held-out person has a passage (checked with every hop above).
  for (const p of heldOut) assert.ok(byTitle.has(p), `${p} has a passage`);
});

test("searching a city or a country also returns distractors that share its name (people born there, companies based there, cities in it)", () => {
  const places = new Set(world.train.concat(world.heldOut).flatMap((q) => q.hops.slice(1).map((h) => h.query)));
  assert.ok(places.size >= 40, `the second and third hops search ${places.size} cities and countries`);
  for (const place of places) {
    const hits = index.search(place, TOP_K);
    const distractors = hits.filter((h) => h.title !== place && h.text.split(" ").includes(place));
    assert.ok(distractors.length >= 1, `searching ${place} returns a passage about something else that names it: ${JSON.stringify(hits.map((h) => h.title))}`);
  }
  // A person's passage also names their employer, whose own passage names a city: names to read past.
  assert.ok(world.corpus.some((p) => / works at /.test(p.text)) && world.corpus.some((p) => / is a company based in /.test(p.text)));
});

test("an evaluation is broken down by category: EM and searches per hop count, in hop order, over the held-out questions of each", () => {
  const qs = world.heldOut.slice(0, 6);
  // A right answer for the 1- and 3-hop questions, a wrong one for the 2-hop ones; searches as many as the hops.
  const samples = qs.map((q) => ({ itemId: q.id, golds: q.golds, response: `<answer> ${q.hops.length === 2 ? "nowhere" : q.golds[0]} </answer>`, calls: q.hops.map((h) => h.query) })) as unknown as ScoredSample[];
  const by = evalByCategory(world.heldOut, samples, emReward);
  const expect = (hops: number) => {
    const mine = qs.filter((q) => q.hops.length === hops);
    return { category: hopCategory(hops), items: mine.length, em: hops === 2 ? 0 : 1, callsPerSample: hops };
  };
  assert.deepEqual(by, [expect(1), expect(2), expect(3)]);
  assert.deepEqual(emByCategory({ byCategory: by }), { "1 hop": 1, "2 hops": 0, "3 hops": 1 });
  assert.equal(emByCategory({ byCategory: [] }), undefined, "no categories, no field");
  assert.deepEqual(evalByCategory(world.heldOut.map(({ category: _c, ...q }) => q), samples, emReward), [], "questions without a category are left out");
});
