/**
 * `npm run bench -- bm25 [docs] [queries]`: build time and queries/s of the
 * Search-R1 BM25 index against wink-bm25-text-search and minisearch, measured
 * in the same run on the same seeded synthetic corpus (default 100,000
 * passages of ~100 Zipf-distributed words, 1,000 five-word queries). Goal:
 * ≥ 100× the best peer's queries/s.
 *
 * Fairness: every engine gets the same analyzer (`tokenize`: lowercase, split
 * on non-alphanumerics, Lucene's English stopwords, which the synthetic words
 * never hit), the same k1 = 0.9 / b = 0.4, and is asked for the top 10. The
 * peers score with their own BM25 variants (wink: BM25F over the two fields;
 * minisearch: BM25+ with its default d), so only ours is checked for
 * correctness: its top 10 against a straightforward reference BM25 (plain
 * arrays, no pruning, full sort, its own regex tokenizer).
 */
import { createRequire } from "node:module";
import MiniSearch from "minisearch";
import { Bm25Index, tokenize, type Bm25Passage } from "../sdk/envs/searchr1/retrieval/bm25.js";
import { table } from "./stats.js";
import { rng } from "../sdk/envs/searchr1/tasks/synthetic.js";

const K = 10;


/** Seeded corpus: a 50,000-word vocabulary drawn with Zipf(s = 1) frequencies. */
function corpus(docs: number, queries: number, seed: number): { passages: Bm25Passage[]; content: string[]; any: string[] } {
  const rand = rng(seed);
  const syllables = ["ka", "lo", "mi", "ne", "su", "ta", "vo", "ri", "pe", "du", "go", "ba", "ze", "hu", "fi", "wa"];
  const vocab: string[] = [];
  const seen = new Set<string>();
  while (vocab.length < 50_000) {
    const n = 2 + Math.floor(rand() * 3);
    let w = "";
    for (let i = 0; i < n; i++) w += syllables[Math.floor(rand() * syllables.length)];
    if (seen.has(w)) continue;
    seen.add(w);
    vocab.push(w);
  }
  const rank = new Map(vocab.map((w, r) => [w, r]));
  const cdf = new Float64Array(vocab.length);
  let total = 0;
  for (let r = 0; r < vocab.length; r++) cdf[r] = total += 1 / (r + 1);
  const word = (): string => {
    const u = rand() * total;
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (cdf[mid] < u) lo = mid + 1;
      else hi = mid;
    }
    return vocab[lo];
  };
  const words = (n: number): string[] => Array.from({ length: n }, word);
  const passages: Bm25Passage[] = [];
  for (let d = 0; d < docs; d++) {
    passages.push({ id: `p${d}`, title: words(2).join(" "), text: words(80 + Math.floor(rand() * 41)).join(" ") });
  }
  // A query: 5 distinct words of a random passage, as a question about it would be. "content"
  // queries skip the 100 most frequent words (the synthetic language's function words, which a
  // real question's analyzer would drop); "any" queries may take them, which is far harder.
  const pick = (skip: number): string => {
    for (;;) {
      const ws = [...new Set(passages[Math.floor(rand() * docs)].text.split(" "))].filter((w) => rank.get(w)! >= skip);
      if (ws.length < 5) continue;
      const chosen = new Set<string>();
      while (chosen.size < 5) chosen.add(ws[Math.floor(rand() * ws.length)]);
      return [...chosen].join(" ");
    }
  };
  const content = Array.from({ length: queries }, () => pick(100));
  const any = Array.from({ length: queries }, () => pick(0));
  return { passages, content, any };
}

/** A straightforward BM25: arrays of postings per term, every matching doc scored, fully sorted. */
function referenceIndex(passages: Bm25Passage[], k1: number, b: number): (q: string) => Array<{ index: number; score: number }> {
  const split = (s: string): string[] => s.toLowerCase().split(/[^\p{L}\p{N}]+/u).filter((w) => w !== "");
  const postings = new Map<string, { docs: number[]; tfs: number[] }>();
  const lengths: number[] = [];
  passages.forEach((p, d) => {
    const tokens = [...split(p.title), ...split(p.text)];
    lengths.push(tokens.length);
    const tf = new Map<string, number>();
    for (const t of tokens) tf.set(t, (tf.get(t) ?? 0) + 1);
    for (const [t, n] of tf) {
      const list = postings.get(t) ?? postings.set(t, { docs: [], tfs: [] }).get(t)!;
      list.docs.push(d);
      list.tfs.push(n);
    }
  });
  const N = passages.length;
  const avgdl = lengths.reduce((s, l) => s + l, 0) / N;
  return (q) => {
    const scores = new Map<number, number>();
    for (const t of split(q)) {
      const list = postings.get(t);
      if (!list) continue;
      const idf = Math.log(1 + (N - list.docs.length + 0.5) / (list.docs.length + 0.5));
      list.docs.forEach((d, i) => {
        const tf = list.tfs[i];
        const s = (idf * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * lengths[d]) / avgdl));
        scores.set(d, (scores.get(d) ?? 0) + s);
      });
    }
    return [...scores].map(([index, score]) => ({ index, score })).sort((x, y) => y.score - x.score || x.index - y.index);
  };
}

interface Engine {
  name: string;
  buildMs: number;
  search: (q: string) => unknown;
}

interface WinkEngine {
  defineConfig(cfg: object): void;
  definePrepTasks(tasks: Array<(s: string) => string[]>): void;
  addDoc(doc: object, id: number): void;
  consolidate(): void;
  search(q: string, limit: number): Array<[number, number]>;
}

function timed<T>(fn: () => T): [T, number] {
  const t0 = performance.now();
  const out = fn();
  return [out, performance.now() - t0];
}

function buildOurs(passages: Bm25Passage[]): Engine {
  const [index, buildMs] = timed(() => Bm25Index.build(passages));
  return { name: "hearth Bm25Index", buildMs, search: (q) => index.search(q, K) };
}

function buildWink(passages: Bm25Passage[]): Engine {
  const wink = createRequire(import.meta.url)("wink-bm25-text-search") as () => WinkEngine;
  const [engine, buildMs] = timed(() => {
    const e = wink();
    e.defineConfig({ fldWeights: { title: 1, text: 1 }, bm25Params: { k1: 0.9, b: 0.4 } });
    e.definePrepTasks([(s) => tokenize(s)]);
    passages.forEach((p, i) => e.addDoc({ title: p.title, text: p.text }, i));
    e.consolidate();
    return e;
  });
  return { name: "wink-bm25-text-search", buildMs, search: (q) => engine.search(q, K) };
}

function buildMiniSearch(passages: Bm25Passage[]): Engine {
  const [ms, buildMs] = timed(() => {
    const m = new MiniSearch<{ id: number; title: string; text: string }>({
      fields: ["title", "text"],
      tokenize: (s) => tokenize(s),
      processTerm: (t) => t,
      searchOptions: { bm25: { k: 0.9, b: 0.4, d: 0.5 } },
    });
    m.addAll(passages.map((p, id) => ({ id, title: p.title, text: p.text })));
    return m;
  });
  return { name: "minisearch", buildMs, search: (q) => ms.search(q).slice(0, K) };
}

/** Queries/s over `queries` (after a warm-up pass over the first 20). */
function rate(engine: Engine, queries: string[]): number {
  for (const q of queries.slice(0, 20)) engine.search(q);
  const [, ms] = timed(() => {
    for (const q of queries) engine.search(q);
  });
  return (queries.length / ms) * 1000;
}

/** recall@10 of ours against the reference, and the largest relative score difference rank by rank. */
function check(ours: Engine, reference: (q: string) => Array<{ index: number; score: number }>, queries: string[]): [number, number] {
  let found = 0;
  let wanted = 0;
  let maxRelErr = 0;
  for (const q of queries) {
    const want = reference(q).slice(0, K);
    const got = ours.search(q) as Array<{ index: number; score: number }>;
    const ids = new Set(got.map((h) => h.index));
    found += want.filter((h) => ids.has(h.index)).length;
    wanted += want.length;
    want.forEach((h, i) => (maxRelErr = Math.max(maxRelErr, Math.abs((got[i]?.score ?? 0) - h.score) / h.score)));
  }
  return [wanted === 0 ? 1 : found / wanted, maxRelErr];
}

/** Runs the benchmark and prints the table; returns the headline numbers. */
export async function benchBm25(args: string[]): Promise<Record<string, number>> {
  const docs = Number(args[0] ?? 100_000);
  const nQueries = Number(args[1] ?? 1_000);
  const peerHard = Math.min(nQueries, Number(args[2] ?? 50)); // peers run ~5 "any" queries/s at 100k docs
  const [{ passages, content, any }, genMs] = timed(() => corpus(docs, nQueries, 20_241_130));
  console.log(`corpus: ${docs} passages, ${nQueries} + ${nQueries} five-word queries (generated in ${(genMs / 1000).toFixed(1)} s)`);
  console.log(`peers run all ${nQueries} content queries and the first ${peerHard} "any" queries\n`);

  const rows: Array<Record<string, string | number>> = [];
  const row = (name: string, buildMs: number, c: number, a: number): number =>
    rows.push({ engine: name, "build s": buildMs / 1000, "content q/s": Math.round(c), "any-word q/s": Math.round(a) });
  const ours = buildOurs(passages);
  const oursContent = rate(ours, content);
  const oursAny = rate(ours, any);
  row(ours.name, ours.buildMs, oursContent, oursAny);

  const [reference, refBuildMs] = timed(() => referenceIndex(passages, 0.9, 0.4));
  const checked = any.slice(0, 200);
  const [[recallContent, errContent], refContentMs] = timed(() => check(ours, reference, content));
  const [[recallAny, errAny], refAnyMs] = timed(() => check(ours, reference, checked));
  row("reference (naive)", refBuildMs, (content.length / refContentMs) * 1000, (checked.length / refAnyMs) * 1000);

  const peers: Array<{ name: string; content: number; any: number }> = [];
  for (const build of [buildWink, buildMiniSearch]) {
    const peer = build(passages);
    const p = { name: peer.name, content: rate(peer, content), any: rate(peer, any.slice(0, peerHard)) };
    peers.push(p);
    row(peer.name, peer.buildMs, p.content, p.any);
  }
  console.log(table(rows));
  const best = peers.reduce((a, p) => (p.content > a.content ? p : a));
  const bestAny = peers.reduce((a, p) => (p.any > a.any ? p : a));
  const ratio = oursContent / best.content;
  const ratioAny = oursAny / bestAny.any;
  console.log(`\nours / best peer, content queries (${best.name}): ${ratio.toFixed(0)}× (goal ≥ 100×)`);
  console.log(`ours / best peer, any-word queries (${bestAny.name}): ${ratioAny.toFixed(0)}×`);
  console.log(`recall@${K} vs reference: content ${recallContent.toFixed(4)} (${content.length} queries), any-word ${recallAny.toFixed(4)} (${checked.length}); ` +
    `max relative score difference by rank: ${Math.max(errContent, errAny).toExponential(1)}`);
  return { oursContent, oursAny, bestPeerContent: best.content, bestPeerAny: bestAny.any, ratio, ratioAny, recallContent, recallAny };
}
