/**
 * The text analyzer of the BM25 index, shared by passages and queries:
 * lowercase (`String.prototype.toLowerCase`, so Unicode-aware), split on
 * everything that is not a Unicode letter or digit (`[^\p{L}\p{N}]`), and
 * optionally drop {@link ENGLISH_STOPWORDS}. No stemming. ASCII text takes a
 * char-code fast path; other text goes through the equivalent regex.
 *
 * ```ts
 * tokenize("The U.S. isn't 2-dimensional"); // ["u", "s", "isn", "t", "2", "dimensional"]
 * ```
 */

/**
 * Lucene's English stopword set (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`,
 * 33 words), which Pyserini's default analyzer also drops.
 */
export const ENGLISH_STOPWORDS: ReadonlySet<string> = new Set([
  "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
  "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
  "will", "with",
]);

const WORD = /[\p{L}\p{N}]+/gu;
const NON_ASCII = /[\u0080-\uffff]/; // any code unit past ASCII, surrogates included

/** The analyzed tokens of `text`; `stopwords` (default true) drops {@link ENGLISH_STOPWORDS}. */
export function tokenize(text: string, stopwords = true): string[] {
  const out: string[] = [];
  forEachToken(text, stopwords, (t) => out.push(t));
  return out;
}

/** Calls `fn` with each analyzed token of `text` in order, without building an array. */
export function forEachToken(text: string, stopwords: boolean, fn: (token: string) => void): void {
  const s = text.toLowerCase();
  if (NON_ASCII.test(s)) {
    for (const m of s.matchAll(WORD)) if (!stopwords || !ENGLISH_STOPWORDS.has(m[0])) fn(m[0]);
    return;
  }
  let start = -1;
  for (let i = 0; i <= s.length; i++) {
    const c = i < s.length ? s.charCodeAt(i) : 32;
    if ((c >= 97 && c <= 122) || (c >= 48 && c <= 57)) {
      if (start < 0) start = i;
    } else if (start >= 0) {
      const token = s.slice(start, i);
      start = -1;
      if (!stopwords || !ENGLISH_STOPWORDS.has(token)) fn(token);
    }
  }
}
