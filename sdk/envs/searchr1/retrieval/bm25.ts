/**
 * An in-memory Okapi BM25 index over passages (title + text), built for query
 * speed inside a rollout executor: retrieval never leaves the process.
 *
 * ```ts
 * const index = Bm25Index.build([{ title: "Paris", text: "Paris is the capital of France." }]);
 * index.search("capital of france", 3); // [{ index: 0, score: …, title: "Paris", text: … }]
 * ```
 *
 * Scoring (Robertson's BM25 with Lucene's idf, as Pyserini):
 *   idf(t)      = ln(1 + (N − df + 0.5) / (df + 0.5))
 *   score(q, d) = Σ_{t ∈ q} idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · |d| / avgdl))
 * summed once per occurrence of t in the query. k1 = 0.9, b = 0.4 by default
 * (Pyserini's). Lucene ≥ 8 drops the constant (k1 + 1) factor and stores |d|
 * lossily in one byte; scores here are exact, and ranks match up to that.
 *
 * Layout: term t's postings are `docs[offsets[t] .. offsets[t+1])` (ascending
 * doc indices, Uint32Array) with frequencies in `tfs` (Uint16Array; a term
 * repeated more than 65,535 times in one passage counts 65,535). Each
 * document's `k1 · (1 − b + b · |d| / avgdl)` is precomputed. Doc ids are
 * stored whole rather than delta-coded so that the pruning phase below can
 * gallop through a list.
 *
 * Query evaluation is term-at-a-time into a score accumulator with MaxScore
 * pruning: terms are taken in decreasing order of their best possible
 * contribution; once the k-th best partial score exceeds what all remaining
 * terms together could add, no unseen document can enter the top k, so the
 * remaining (frequent, low-idf) terms only update the surviving candidates by
 * galloping search. Results are exact; ties rank the lower doc index first.
 */
import { HearthError } from "../../../errors/index.js";
import { forEachToken } from "./bm25-analyzer.js";
import { kthBest, topK, type TopK } from "./bm25-heap.js";

export { ENGLISH_STOPWORDS, tokenize } from "./bm25-analyzer.js";

/** A passage to index. `id` is carried through to hits; it need not be unique. */
export interface Bm25Passage {
  id?: string;
  title: string;
  text: string;
}

/** Options of {@link Bm25Index.build}. */
export interface Bm25Options {
  /** Term-frequency saturation, ≥ 0; default 0.9 (Pyserini). */
  k1?: number;
  /** Length normalization in [0, 1]; default 0.4 (Pyserini). */
  b?: number;
  /** Drop {@link ENGLISH_STOPWORDS} from passages and queries; default true. */
  stopwords?: boolean;
}

/** One result of {@link Bm25Index.search}. */
export interface Bm25Hit {
  /** Position of the passage in the array given to `build`. */
  index: number;
  /** The passage's `id`, when it had one. */
  id?: string;
  score: number;
  title: string;
  text: string;
}

/** Invalid passages, options, query arguments, or a buffer that is not a serialized index. */
export class Bm25Error extends HearthError {
  override name = "Bm25Error";
}

interface Postings {
  terms: Map<string, number>;
  offsets: Uint32Array; // (V + 1)
  docs: Uint32Array; // (P)
  tfs: Uint16Array; // (P)
  lengths: Uint32Array; // (N) tokens per passage after analysis
}

interface Params {
  k1: number;
  b: number;
  stopwords: boolean;
}

const MAGIC = "hearth-bm25 v1\n";

/** An immutable BM25 index; build with {@link Bm25Index.build} or {@link Bm25Index.deserialize}. */
export class Bm25Index {
  /** Term-frequency saturation. */
  readonly k1: number;
  /** Length normalization. */
  readonly b: number;
  /** Whether stopwords are dropped from passages and queries. */
  readonly stopwords: boolean;
  private readonly passages: readonly Bm25Passage[];
  private readonly p: Postings;
  private readonly idf: Float64Array; // (V)
  private readonly maxWeight: Float64Array; // (V) idf · max over postings of the tf part
  private readonly norms: Float64Array; // (N) k1 · (1 − b + b · |d| / avgdl)
  private readonly avgdl: number;
  private readonly acc: Float64Array; // (N) scratch accumulator, all zero between searches
  private readonly touched: Uint32Array; // (N + 1) scratch: docs with a nonzero accumulator

  private constructor(passages: readonly Bm25Passage[], postings: Postings, params: Params) {
    this.k1 = params.k1;
    this.b = params.b;
    this.stopwords = params.stopwords;
    this.passages = passages;
    this.p = postings;
    const n = passages.length;
    const V = postings.offsets.length - 1;
    let total = 0;
    for (let d = 0; d < n; d++) total += postings.lengths[d];
    this.avgdl = total > 0 ? total / n : 1;
    this.norms = new Float64Array(n);
    for (let d = 0; d < n; d++) this.norms[d] = this.k1 * (1 - this.b + (this.b * postings.lengths[d]) / this.avgdl);
    this.idf = new Float64Array(V);
    this.maxWeight = new Float64Array(V);
    const { offsets, docs, tfs } = postings;
    const k1p1 = this.k1 + 1;
    for (let t = 0; t < V; t++) {
      const df = offsets[t + 1] - offsets[t];
      this.idf[t] = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      let best = 0;
      for (let q = offsets[t]; q < offsets[t + 1]; q++) {
        const tf = tfs[q];
        const w = (tf * k1p1) / (tf + this.norms[docs[q]]);
        if (w > best) best = w;
      }
      this.maxWeight[t] = this.idf[t] * best;
    }
    this.acc = new Float64Array(n);
    this.touched = new Uint32Array(n + 1); // + 1: accumulate writes one slot past the end
  }

  /** Indexes `passages` (title and text analyzed together). Throws {@link Bm25Error} for a malformed passage or option. */
  static build(passages: readonly Bm25Passage[], options: Bm25Options = {}): Bm25Index {
    const params = checkParams(options);
    if (!Array.isArray(passages)) throw new Bm25Error("passages must be an array of { title, text }");
    const terms = new Map<string, number>();
    // Pass 1: per passage, its distinct terms and their frequencies, in passage order.
    let pairTerm = new Uint32Array(1 << 16);
    let pairTf = new Uint16Array(1 << 16);
    let pairs = 0;
    let df = new Uint32Array(1024);
    let seen = new Int32Array(1024).fill(-1); // term → slot in this passage's pairs, or -1
    const lengths = new Uint32Array(passages.length);
    const bounds = new Uint32Array(passages.length + 1); // passage d's pairs: [bounds[d], bounds[d+1])
    for (let d = 0; d < passages.length; d++) {
      const { title, text } = checkPassage(passages[d], d);
      let len = 0;
      const add = (token: string): void => {
        len++;
        let t = terms.get(token);
        if (t === undefined) {
          t = terms.size;
          terms.set(token, t);
          if (t >= df.length) {
            df = grow(df, df.length * 2);
            const s = new Int32Array(seen.length * 2).fill(-1);
            s.set(seen);
            seen = s;
          }
        }
        const slot = seen[t];
        if (slot >= 0) {
          if (pairTf[slot] < 0xffff) pairTf[slot]++;
          return;
        }
        if (pairs === pairTerm.length) {
          pairTerm = grow(pairTerm, pairs * 2);
          pairTf = grow(pairTf, pairs * 2);
        }
        seen[t] = pairs;
        pairTerm[pairs] = t;
        pairTf[pairs++] = 1;
        df[t]++;
      };
      forEachToken(title, params.stopwords, add);
      forEachToken(text, params.stopwords, add);
      for (let q = bounds[d]; q < pairs; q++) seen[pairTerm[q]] = -1;
      lengths[d] = len;
      bounds[d + 1] = pairs;
    }
    // Pass 2: scatter the pairs into per-term lists; passage order keeps each list sorted.
    const V = terms.size;
    const offsets = new Uint32Array(V + 1);
    for (let t = 0; t < V; t++) offsets[t + 1] = offsets[t] + df[t];
    const cursor = offsets.slice(0, V);
    const docs = new Uint32Array(pairs);
    const tfs = new Uint16Array(pairs);
    for (let d = 0; d < passages.length; d++) {
      for (let q = bounds[d]; q < bounds[d + 1]; q++) {
        const at = cursor[pairTerm[q]]++;
        docs[at] = d;
        tfs[at] = pairTf[q];
      }
    }
    const ps = passages.map((x) => (x.id === undefined ? { title: x.title, text: x.text } : { id: x.id, title: x.title, text: x.text }));
    return new Bm25Index(ps, { terms, offsets, docs, tfs, lengths }, params);
  }

  /** Number of passages. */
  get size(): number {
    return this.passages.length;
  }

  /** Number of distinct terms. */
  get vocabularySize(): number {
    return this.p.terms.size;
  }

  /** Mean analyzed passage length in tokens (1 for an index of empty passages). */
  get averageLength(): number {
    return this.avgdl;
  }

  /**
   * The `k` best passages for `query`, best first (ties: lower index first).
   * Terms unknown to the index are ignored; an empty or all-unknown query
   * returns []. Throws {@link Bm25Error} unless `k` is an integer ≥ 0.
   */
  search(query: string, k = 10): Bm25Hit[] {
    if (typeof query !== "string") throw new Bm25Error(`query must be a string, got ${typeof query}`);
    if (!Number.isInteger(k) || k < 0) throw new Bm25Error(`k must be an integer ≥ 0, got ${k}`);
    const counts = new Map<number, number>();
    forEachToken(query, this.stopwords, (token) => {
      const t = this.p.terms.get(token);
      if (t !== undefined) counts.set(t, (counts.get(t) ?? 0) + 1);
    });
    if (counts.size === 0 || k === 0) return [];
    // Best possible contribution first; rest[i] bounds what terms i.. can still add.
    const qs = [...counts].map(([t, c]) => ({ t, c, ub: c * this.maxWeight[t] })).sort((x, y) => y.ub - x.ub || x.t - y.t);
    const rest = new Float64Array(qs.length + 1);
    const left = new Float64Array(qs.length + 1); // postings of terms i..
    for (let i = qs.length - 1; i >= 0; i--) {
      rest[i] = rest[i + 1] + qs[i].ub;
      left[i] = left[i + 1] + this.p.offsets[qs[i].t + 1] - this.p.offsets[qs[i].t];
    }

    const { acc, touched } = this;
    let nTouched = 0;
    let i = 0;
    for (; i < qs.length; i++) {
      // Pruning costs about two passes over the touched documents, so it must save more postings
      // than that; and θ is at most what terms 0..i-1 could add, so that must beat rest[i].
      // The k-th best of a bounded prefix of `touched` is a cheaper, still valid, lower bound on θ.
      const worthChecking = i > 0 && nTouched >= k && left[i] > PRUNE_FACTOR * nTouched && rest[i] < rest[0] - rest[i];
      if (worthChecking && rest[i] * SLACK < kthBest(acc, touched, Math.min(nTouched, THETA_SAMPLE), k)) break;
      nTouched = this.accumulate(qs[i].t, qs[i].c, nTouched);
    }
    let result: Bm25Hit[];
    if (i === qs.length) {
      result = this.hits(topK(acc, touched, nTouched, k, true));
    } else {
      // Only documents already seen can still reach the top k.
      let theta = kthBest(acc, touched, Math.min(nTouched, THETA_SAMPLE), k);
      let cands = new Uint32Array(nTouched);
      let nCands = 0;
      for (let j = 0; j < nTouched; j++) if (acc[touched[j]] + rest[i] * SLACK >= theta) cands[nCands++] = touched[j];
      cands = cands.subarray(0, nCands).sort();
      for (; i < qs.length; i++) {
        this.gallop(qs[i].t, qs[i].c, cands);
        theta = kthBest(acc, cands, cands.length, k);
        let kept = 0;
        for (let j = 0; j < cands.length; j++) if (acc[cands[j]] + rest[i + 1] * SLACK >= theta) cands[kept++] = cands[j];
        cands = cands.subarray(0, kept);
      }
      result = this.hits(topK(acc, cands, cands.length, k, false));
      // A sequential fill beats scattered writes once many documents were touched.
      if (nTouched > acc.length >>> 3) acc.fill(0);
      else for (let j = 0; j < nTouched; j++) acc[touched[j]] = 0;
    }
    return result;
  }

  /**
   * The index as one Buffer (passages, vocabulary, postings, parameters), for
   * {@link Bm25Index.deserialize}. Scores and norms are recomputed on load.
   */
  serialize(): Buffer {
    const terms = [...this.p.terms.keys()];
    const meta = Buffer.from(
      JSON.stringify({ k1: this.k1, b: this.b, stopwords: this.stopwords, passages: this.passages, terms, postings: this.p.docs.length }),
    );
    const head = Buffer.alloc(MAGIC.length + 4);
    head.write(MAGIC, 0, "latin1");
    head.writeUInt32LE(meta.length, MAGIC.length);
    const pad = Buffer.alloc((8 - ((head.length + meta.length) % 8)) % 8);
    const { offsets, docs, lengths, tfs } = this.p;
    return Buffer.concat([head, meta, pad, bytes(offsets), bytes(docs), bytes(lengths), bytes(tfs)]);
  }

  /** Rebuilds an index from {@link Bm25Index.serialize}'s output; throws {@link Bm25Error} for anything else. */
  static deserialize(buf: Uint8Array): Bm25Index {
    const data = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
    if (data.length < MAGIC.length + 4 || data.toString("latin1", 0, MAGIC.length) !== MAGIC) {
      throw new Bm25Error("not a serialized Bm25Index (bad header)");
    }
    const metaLen = data.readUInt32LE(MAGIC.length);
    let at = MAGIC.length + 4;
    let meta: { k1: number; b: number; stopwords: boolean; passages: Bm25Passage[]; terms: string[]; postings: number };
    try {
      meta = JSON.parse(data.toString("utf8", at, at + metaLen));
    } catch (err) {
      throw new Bm25Error("serialized Bm25Index has a corrupt header", { cause: err });
    }
    at += metaLen;
    at += (8 - (at % 8)) % 8;
    const V = meta.terms.length;
    const N = meta.passages.length;
    const P = meta.postings;
    if (data.length !== at + 4 * (V + 1 + P + N) + 2 * P) throw new Bm25Error("serialized Bm25Index is truncated or has trailing bytes");
    const u32 = (n: number): Uint32Array => new Uint32Array(copy(data.subarray(at, (at += 4 * n))));
    const offsets = u32(V + 1);
    const docs = u32(P);
    const lengths = u32(N);
    const tfs = new Uint16Array(copy(data.subarray(at, (at += 2 * P))));
    const terms = new Map(meta.terms.map((t, i) => [t, i]));
    return new Bm25Index(meta.passages, { terms, offsets, docs, tfs, lengths }, checkParams(meta));
  }

  private hits(best: TopK): Bm25Hit[] {
    return Array.from(best.docs, (d, j) => {
      const passage = this.passages[d];
      const hit: Bm25Hit = { index: d, score: best.scores[j], title: passage.title, text: passage.text };
      if (passage.id !== undefined) hit.id = passage.id;
      return hit;
    });
  }

  /** Adds term t's contribution (×c) to every posting's accumulator; returns the new touched count. */
  private accumulate(t: number, c: number, nTouched: number): number {
    const { acc, touched, norms } = this;
    const { docs, tfs, offsets } = this.p;
    const w = c * this.idf[t];
    const k1p1 = this.k1 + 1;
    for (let q = offsets[t], end = offsets[t + 1]; q < end; q++) {
      const d = docs[q];
      const tf = tfs[q];
      const a = acc[d];
      // Branch-free: the slot is overwritten unless d is new (scores are > 0 once touched).
      touched[nTouched] = d;
      nTouched += a === 0 ? 1 : 0;
      acc[d] = a + (w * (tf * k1p1)) / (tf + norms[d]);
    }
    return nTouched;
  }

  /** Adds term t's contribution to the candidates (ascending) only, galloping through its postings. */
  private gallop(t: number, c: number, cands: Uint32Array): void {
    const { acc, norms } = this;
    const { docs, tfs, offsets } = this.p;
    const w = c * this.idf[t];
    const k1p1 = this.k1 + 1;
    const end = offsets[t + 1];
    let lo = offsets[t];
    for (let j = 0; j < cands.length && lo < end; j++) {
      const d = cands[j];
      if (docs[lo] < d) {
        // Exponential probe, then binary search in (lo + step/2, lo + step].
        let step = 1;
        while (lo + step < end && docs[lo + step] < d) step *= 2;
        let left = lo + (step >> 1) + 1;
        let right = Math.min(lo + step, end);
        while (left < right) {
          const mid = (left + right) >>> 1;
          if (docs[mid] < d) left = mid + 1;
          else right = mid;
        }
        lo = left;
        if (lo === end) break;
      }
      if (docs[lo] === d) {
        const tf = tfs[lo];
        acc[d] += (w * (tf * k1p1)) / (tf + norms[d]);
      }
    }
  }
}

/** Pruning is tried only when the remaining postings outnumber the touched documents this many times (tuned on the bench). */
const PRUNE_FACTOR = 4;

/** How many touched documents the pruning check looks at to bound the k-th best score. */
const THETA_SAMPLE = 2048;

/** Pruning keeps a document unless it falls short by more than rounding error. */
const SLACK = 1 + 1e-9;

function checkParams(options: Bm25Options): Params {
  const k1 = options.k1 ?? 0.9;
  const b = options.b ?? 0.4;
  if (typeof k1 !== "number" || !Number.isFinite(k1) || k1 < 0) throw new Bm25Error(`k1 must be a finite number ≥ 0, got ${k1}`);
  if (typeof b !== "number" || !(b >= 0 && b <= 1)) throw new Bm25Error(`b must be a number in [0, 1], got ${b}`);
  return { k1, b, stopwords: options.stopwords ?? true };
}

function checkPassage(p: Bm25Passage, d: number): Bm25Passage {
  if (p === null || typeof p !== "object") throw new Bm25Error(`passage ${d} is not an object with title and text`);
  if (typeof p.title !== "string") throw new Bm25Error(`passage ${d} has no string title`);
  if (typeof p.text !== "string") throw new Bm25Error(`passage ${d} has no string text`);
  if (p.id !== undefined && typeof p.id !== "string") throw new Bm25Error(`passage ${d} has an id that is not a string`);
  return p;
}

function grow<T extends Uint32Array | Uint16Array>(a: T, n: number): T {
  const out = new (a.constructor as new (n: number) => T)(n);
  out.set(a);
  return out;
}

function bytes(a: Uint32Array | Uint16Array): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

function copy(src: Buffer): ArrayBuffer {
  return src.buffer.slice(src.byteOffset, src.byteOffset + src.byteLength) as ArrayBuffer;
}
