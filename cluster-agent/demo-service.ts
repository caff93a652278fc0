/**
 * The service the runtime demo runs: its `init` builds a warm state (a
 * word index over a small built-in corpus) once per executor, and its methods
 * use that state on every call.
 */
import type { ExecutorContext } from "../sdk/runtime/types.js";

const CORPUS = [
  "hearth keeps executors warm between notebook cells",
  "a pool grows while calls pend and shrinks when idle",
  "a gang is granted all together or not at all",
  "objects larger than a call message travel by reference",
  "retrieved tokens are masked from the policy gradient loss",
];

/** A tiny warm service: an inverted index built once in `init`. */
export class WarmIndex {
  private index = new Map<string, number[]>();
  private executorId = "";
  private calls = 0;

  async init(ctx: ExecutorContext): Promise<void> {
    this.executorId = ctx.executorId;
    CORPUS.forEach((doc, i) => {
      for (const w of doc.split(" ")) this.index.set(w, [...(this.index.get(w) ?? []), i]);
    });
  }

  /** Documents containing every word of `query`; slow enough to make the pool grow. */
  async search(query: string, delayMs = 0): Promise<{ executor: string; calls: number; hits: string[] }> {
    this.calls++;
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    const sets = query.split(/\s+/).map((w) => new Set(this.index.get(w) ?? []));
    const hits = [...(sets[0] ?? [])].filter((d) => sets.every((s) => s.has(d)));
    return { executor: this.executorId, calls: this.calls, hits: hits.map((d) => CORPUS[d]!) };
  }
}
