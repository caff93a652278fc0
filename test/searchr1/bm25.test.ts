import assert from "node:assert/strict";
import { test } from "node:test";
import { Bm25Error, Bm25Index, tokenize, type Bm25Passage } from "../../sdk/envs/searchr1/retrieval/bm25.js";

const tiny: Bm25Passage[] = [
  { title: "", text: "cat dog dog" }, // 3 tokens
  { title: "", text: "cat cat cat fish" }, // 4 tokens
  { title: "", text: "bird" }, // 1 token
];

/** BM25 of one term in one document, written out from the formula. */
function termScore(tf: number, df: number, dl: number, n: number, avgdl: number, k1 = 0.9, b = 0.4): number {
  const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
  return (idf * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * dl) / avgdl));
}

function close(actual: number, expected: number, what: string): void {
  assert.ok(Math.abs(actual - expected) <= 1e-12 * Math.max(1, Math.abs(expected)), `${what}: ${actual} != ${expected}`);
}

test("scores equal hand-computed BM25 (Lucene idf, k1 = 0.9, b = 0.4)", () => {
  const index = Bm25Index.build(tiny);
  assert.equal(index.k1, 0.9);
  assert.equal(index.b, 0.4);
  const avgdl = 8 / 3;
  close(index.averageLength, avgdl, "avgdl");
  const hits = index.search("dog cat", 10);
  assert.deepEqual(
    hits.map((h) => h.index),
    [0, 1],
  );
  close(hits[0]!.score, termScore(2, 1, 3, 3, avgdl) + termScore(1, 2, 3, 3, avgdl), "doc 0");
  close(hits[1]!.score, termScore(3, 2, 4, 3, avgdl), "doc 1");
  // By hand for doc 0's "dog": idf = ln(1 + 2.5/1.5) = ln(8/3); norm = 0.9 · (0.6 + 0.4 · 9/8) = 0.945.
  close(index.search("dog", 1)[0]!.score, (Math.log(8 / 3) * 2 * 1.9) / (2 + 0.945), "dog by hand");
  assert.equal(hits[0]!.text, "cat dog dog");
  assert.equal(hits[0]!.title, "");
});

test("a query term repeated counts once per occurrence", () => {
  const index = Bm25Index.build(tiny);
  close(index.search("dog dog", 1)[0]!.score, 2 * index.search("dog", 1)[0]!.score, "dog dog");
});

test("ranking: more matches and rarer terms rank higher; ties go to the lower index", () => {
  const index = Bm25Index.build([
    { title: "Paris", text: "Paris is the capital of France." },
    { title: "Lyon", text: "Lyon is a city in France." },
    { title: "Berlin", text: "Berlin is the capital of Germany." },
    { title: "Lyon", text: "Lyon is a city in France." },
  ]);
  assert.deepEqual(
    index.search("capital of France", 4).map((h) => h.index),
    [0, 2, 1, 3],
  );
  const tie = index.search("lyon", 10);
  assert.deepEqual(
    tie.map((h) => h.index),
    [1, 3],
  );
  assert.equal(tie[0]!.score, tie[1]!.score);
  assert.equal(index.search("france", 1).length, 1, "k limits the hits");
});

test("k1 and b: b = 0 ignores length, b = 1 penalizes it; k1 = 0 makes term frequency binary", () => {
  const docs = [
    { title: "", text: "apple pear" },
    { title: "", text: "apple pear plum kiwi fig lime" },
    { title: "", text: "apple apple apple kiwi fig lime" },
  ];
  const flat = Bm25Index.build(docs, { b: 0 }).search("pear", 2);
  assert.equal(flat[0]!.score, flat[1]!.score, "b = 0: same tf, any length, same score");
  const strict = Bm25Index.build(docs, { b: 1 }).search("pear", 2);
  assert.deepEqual(
    strict.map((h) => h.index),
    [0, 1],
  );
  assert.ok(strict[0]!.score > strict[1]!.score * 1.2, "b = 1: the long passage is penalized");
  const binary = Bm25Index.build(docs, { k1: 0 }).search("apple", 3);
  assert.equal(binary[0]!.score, binary[2]!.score, "k1 = 0: tf 3 scores like tf 1");
  const saturating = Bm25Index.build(docs, { k1: 2, b: 0 }).search("apple", 3);
  assert.equal(saturating[0]!.index, 2, "k1 > 0: tf 3 beats tf 1");
  assert.throws(() => Bm25Index.build(docs, { b: 1.5 }), Bm25Error);
  assert.throws(() => Bm25Index.build(docs, { k1: -1 }), Bm25Error);
});

test("empty, stopword-only and unknown queries return nothing; unknown terms are ignored", () => {
  const index = Bm25Index.build(tiny);
  assert.deepEqual(index.search("", 5), []);
  assert.deepEqual(index.search("  ?! ", 5), []);
  assert.deepEqual(index.search("the of and", 5), []);
  assert.deepEqual(index.search("zebra unicorn", 5), []);
  assert.deepEqual(index.search("zebra fish unicorn", 5), index.search("fish", 5));
  assert.deepEqual(index.search("fish", 0), []);
  assert.throws(() => index.search("fish", -1), Bm25Error);
  assert.throws(() => index.search("fish", 1.5), Bm25Error);
  assert.deepEqual(Bm25Index.build([]).search("fish", 3), []);
});

test("the analyzer lowercases, splits on non-alphanumerics, drops Lucene's stopwords", () => {
  assert.deepEqual(tokenize("The U.S. isn't 2-dimensional!"), ["u", "s", "isn", "t", "2", "dimensional"]);
  assert.deepEqual(tokenize("The cat", false), ["the", "cat"]);
  assert.deepEqual(tokenize("Café ÜBER naïve—straße 東京"), ["café", "über", "naïve", "straße", "東京"]);
  const index = Bm25Index.build([{ id: "x1", title: "Über Café", text: "menu" }]);
  assert.deepEqual(index.search("über", 1)[0], { index: 0, id: "x1", score: index.search("CAFÉ", 1)[0]!.score, title: "Über Café", text: "menu" });
  assert.equal(Bm25Index.build([{ title: "", text: "the" }], { stopwords: false }).search("the", 1).length, 1);
});

test("malformed passages are rejected with their index", () => {
  assert.throws(
    () => Bm25Index.build([{ title: "a", text: "b" }, { title: "c" } as Bm25Passage]),
    (err: Error) => err instanceof Bm25Error && /passage 1 has no string text/.test(err.message),
  );
  assert.throws(() => Bm25Index.build("nope" as unknown as Bm25Passage[]), Bm25Error);
});

/** Seeded corpus with one word in every passage and rare words, to drive the pruning path. */
function randomCorpus(n: number): Bm25Passage[] {
  let seed = 12345;
  const rand = (): number => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const word = (): string => `w${Math.floor(1 / (rand() * 0.999 + 0.001))}`; // Zipf-like ranks 1..1000
  return Array.from({ length: n }, (_, d) => ({
    title: `t${d % 97}`,
    text: ["common", ...Array.from({ length: 5 + Math.floor(rand() * 30) }, word)].join(" "),
  }));
}

function naive(passages: Bm25Passage[], query: string, k: number): Array<{ index: number; score: number }> {
  const docs = passages.map((p) => tokenize(`${p.title} ${p.text}`));
  const avgdl = docs.reduce((s, d) => s + d.length, 0) / docs.length;
  const scores = docs.map((d, index) => {
    let score = 0;
    for (const t of tokenize(query)) {
      const tf = d.filter((w) => w === t).length;
      const df = docs.filter((x) => x.includes(t)).length;
      if (tf > 0) score += termScore(tf, df, d.length, docs.length, avgdl);
    }
    return { index, score };
  });
  return scores.filter((s) => s.score > 0).sort((a, b) => b.score - a.score || a.index - b.index).slice(0, k);
}

test("top-k with pruning equals brute force on a seeded corpus", () => {
  const passages = randomCorpus(1500);
  const index = Bm25Index.build(passages);
  const queries = ["w700 common", "w300 w2 common w1", "t5 w1 w2 w3 common", "w1 w1 w2", "w999 w998 w3 common t1", "common"];
  for (const q of queries) {
    for (const k of [1, 3, 10]) {
      const want = naive(passages, q, k);
      const got = index.search(q, k);
      assert.deepEqual(
        got.map((h) => h.index),
        want.map((h) => h.index),
        `${q} @${k}`,
      );
      got.forEach((h, i) => close(h.score, want[i]!.score, `${q} @${k} rank ${i}`));
    }
  }
  // Searches leave no state behind: the same query twice gives the same answer.
  assert.deepEqual(index.search("w300 common", 5), index.search("w300 common", 5));
});

test("serialize and deserialize give the same index; a foreign buffer is rejected", () => {
  const passages = [...randomCorpus(300), { id: "p-last", title: "Über", text: "ending" }];
  const index = Bm25Index.build(passages, { k1: 1.2, b: 0.75 });
  const copy = Bm25Index.deserialize(index.serialize());
  assert.equal(copy.k1, 1.2);
  assert.equal(copy.b, 0.75);
  assert.equal(copy.size, index.size);
  assert.equal(copy.vocabularySize, index.vocabularySize);
  for (const q of ["w3 common", "über ending", "t7 w12"]) assert.deepEqual(copy.search(q, 7), index.search(q, 7));
  assert.throws(() => Bm25Index.deserialize(Buffer.from("not an index at all")), Bm25Error);
  assert.throws(() => Bm25Index.deserialize(index.serialize().subarray(0, 100)), Bm25Error);
});
