/**
 * Search-R1 as an environment of the RL layer: each rollout executor builds
 * a BM25 index of the run's corpus once (`init`); a turn that stopped at
 * `</search>` is answered with the top passages inside `<information>`, one
 * past the layer's tool-call limit or without a usable query with the
 * recipe's corrective text; `</answer>` ends the episode. What it writes is
 * the recipe's protocol text (protocol.ts), shipped as the environment's data.
 */
import type { ObjectRef } from "../../cache/object-cache.js";
import type { Environment, EnvironmentContext, EnvStep, EnvTurn } from "../../rl/environment.js";
import type { TaskItem } from "../../rl/types.js";
import { formatInformation, informationBlock, insertion, parseSearch, STOP_STRINGS, type ProtocolText } from "./protocol.js";
import { Bm25Index, type Bm25Options } from "./retrieval/bm25.js";
import type { Passage } from "./tasks/synthetic.js";

/** What a Search-R1 run ships to its rollout executors' environments. */
export interface SearchR1EnvData {
  /** The words the protocol writes. */
  text: ProtocolText;
  /** The passages (by reference: each executor indexes them once). */
  corpus: ObjectRef;
  /** Passages per search. */
  topK: number;
  bm25?: Bm25Options;
}

/** The Search-R1 environment (module `environment.js`, export `SearchR1Environment`). */
export class SearchR1Environment implements Environment<null> {
  readonly name = "search-r1";
  readonly stops = STOP_STRINGS;
  private text!: ProtocolText;
  private index!: Bm25Index;
  private topK = 3;

  async init(ctx: EnvironmentContext): Promise<void> {
    const d = ctx.data as SearchR1EnvData;
    const corpus = await ctx.objects.get<Passage[]>(d.corpus);
    this.load(d.text, corpus, d.topK, d.bm25);
    ctx.objects.forget(d.corpus);
  }

  /** The environment built here from the passages themselves (no cache, no executor): to try it out in a cell, or drive runEpisodes on an engine of one's own. */
  static local(text: ProtocolText, corpus: readonly Passage[], topK = 3, bm25?: Bm25Options): SearchR1Environment {
    const env = new SearchR1Environment();
    env.load(text, corpus, topK, bm25);
    return env;
  }

  private load(text: ProtocolText, corpus: readonly Passage[], topK: number, bm25?: Bm25Options): void {
    this.index = Bm25Index.build(corpus, bm25);
    this.text = text;
    this.topK = topK;
  }

  reset(item: TaskItem): { system: string; user: string; state: null } {
    return { system: this.text.instruction, user: this.text.question.replaceAll("{question}", item.question), state: null };
  }

  step(_state: null, turn: EnvTurn): EnvStep {
    if (turn.stop === "</answer>") return { done: true };
    const query = parseSearch(turn.text);
    const searched = query !== null && turn.callsLeft > 0;
    const block = query === null ? informationBlock(this.text, this.text.invalid) : searched ? formatInformation(this.text, this.index.search(query, this.topK)) : informationBlock(this.text, this.text.limit);
    return { observation: insertion(this.text, block), ...(searched ? { call: query } : {}) };
  }

  /** This executor's index (checks that a member retrieves what it should). */
  search(query: string, k: number): Array<{ title: string; text: string }> {
    return this.index.search(query, k).map((h) => ({ title: h.title, text: h.text }));
  }
}
