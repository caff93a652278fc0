/**
 * Top-k selection for the BM25 index over a score accumulator: size-k binary
 * heaps instead of sorting every matching document. Ranking order is score
 * descending, then document index ascending, so results are deterministic.
 */

/** The k best documents and their scores, best first. */
export interface TopK {
  docs: Uint32Array;
  scores: Float64Array;
}

/**
 * The (at most) k best documents of `list[0..n)` by `acc[doc]`, best first,
 * ties broken by the lower document index. With `clear`, every listed
 * accumulator is reset to 0 in the same pass (the list must then hold each
 * document once), which saves a second trip through memory.
 */
export function topK(acc: Float64Array, list: Uint32Array, n: number, k: number, clear: boolean): TopK {
  const size = Math.min(k, n);
  // A min-heap by (score, -doc): slot 0 holds the worst document kept.
  const hs = new Float64Array(size);
  const hd = new Uint32Array(size);
  let h = 0;
  let j = 0;
  for (; j < n && h < size; j++) {
    const d = list[j];
    const s = acc[d];
    if (clear) acc[d] = 0;
    let i = h++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!(s < hs[p] || (s === hs[p] && d > hd[p]))) break;
      hs[i] = hs[p];
      hd[i] = hd[p];
      i = p;
    }
    hs[i] = s;
    hd[i] = d;
  }
  // Full heap: most documents lose to the worst kept one, held in locals.
  let minS = hs[0];
  let minD = hd[0];
  for (; j < n; j++) {
    const d = list[j];
    const s = acc[d];
    if (clear) acc[d] = 0;
    if (s > minS || (s === minS && d < minD)) {
      siftDown(hs, hd, h, s, d);
      minS = hs[0];
      minD = hd[0];
    }
  }
  const out: TopK = { docs: new Uint32Array(h), scores: new Float64Array(h) };
  for (let j = h - 1; j >= 0; j--) {
    out.docs[j] = hd[0];
    out.scores[j] = hs[0];
    siftDown(hs, hd, j, hs[j], hd[j]);
  }
  return out;
}

/** Replaces the heap's root with (s, d) and restores the heap order over the first n slots. */
function siftDown(hs: Float64Array, hd: Uint32Array, n: number, s: number, d: number): void {
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const m = r < n && (hs[r] < hs[l] || (hs[r] === hs[l] && hd[r] > hd[l])) ? r : l;
    if (!(hs[m] < s || (hs[m] === s && hd[m] > d))) break;
    hs[i] = hs[m];
    hd[i] = hd[m];
    i = m;
  }
  hs[i] = s;
  hd[i] = d;
}

/**
 * The k-th largest `acc[doc]` among `list[0..n)`, or -Infinity when n < k:
 * the score a document must beat to enter the top k.
 */
export function kthBest(acc: Float64Array, list: Uint32Array, n: number, k: number): number {
  if (n < k || k < 1) return -Infinity;
  const heap = new Float64Array(k); // min-heap of the k best scores so far
  for (let j = 0; j < k; j++) {
    let i = j;
    heap[i] = acc[list[j]];
    while (i > 0 && heap[i] < heap[(i - 1) >> 1]) {
      const p = (i - 1) >> 1;
      const tmp = heap[i];
      heap[i] = heap[p];
      heap[p] = tmp;
      i = p;
    }
  }
  for (let j = k; j < n; j++) {
    const s = acc[list[j]];
    if (s <= heap[0]) continue;
    heap[0] = s;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= k) break;
      const m = l + 1 < k && heap[l + 1] < heap[l] ? l + 1 : l;
      if (heap[m] >= heap[i]) break;
      const tmp = heap[i];
      heap[i] = heap[m];
      heap[m] = tmp;
      i = m;
    }
  }
  return heap[0];
}
