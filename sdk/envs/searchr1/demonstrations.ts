/**
 * The bootstrap: a short supervised warm start of the tiny model on generated
 * demonstrations that mix good and poor search behaviour, so that RL starts
 * from a policy that knows the protocol but searches only sometimes (held-out
 * EM near 15–30 %). What RL then has to learn is when and what to search.
 */
import { buildPrompt, formatInformation, insertion, type ProtocolText, type Retrieve } from "./protocol.js";
import type { ChainQuestion } from "./tasks/chain-task.js";
import { KINDS, pick, rng, type Question, type QuestionKind, type SyntheticTask } from "./tasks/synthetic.js";
import type { TextTokenizer } from "../../rl/text/tokenizer.js";

/** How often demonstrations search, per question kind. */
export interface DemoMix {
  /** Probability of the good behaviour (search, then answer from what was read). */
  search: Record<QuestionKind, number>;
  /** Two-hop questions: probability of stopping after one search and answering the city. */
  oneHopOnTwoHop: number;
}

/**
 * The default mix: "where was X born" is usually searched; the other kinds
 * rarely, so the policy mostly guesses them; two-hop questions rarely get
 * their second search. Greedy decoding then answers about a quarter of the
 * held-out questions, while sampling still explores searching everywhere.
 */
export const DEFAULT_MIX: DemoMix = { search: { born: 0.9, job: 0.2, employer: 0.2, country: 0.15 }, oneHopOnTwoHop: 0.35 };

/** Every demonstration searches: the first phase of the warm start, where copying names and answers is learned. */
export const SEARCH_ALWAYS: DemoMix = { search: { born: 1, job: 1, employer: 1, country: 1 }, oneHopOnTwoHop: 0 };

/** A demonstration: tokens with the loss mask (1 on what the policy should produce). */
export type { Demo } from "../../rl/types.js";
import type { Demo } from "../../rl/types.js";

function answerOf(q: Question): string {
  return q.golds[0]!;
}

/** A demonstration's text: the question, then what the policy says (trained) and what the environment inserts (masked). */
type Segments = Array<{ text: string; train: boolean }>;

/** Tokenizes a demonstration: the prompt (masked), then each segment with its mask bit. */
function demoTokens(tokenizer: TextTokenizer, text: ProtocolText, question: string, segments: Segments): Demo {
  const prompt = tokenizer.encode(buildPrompt(tokenizer, text, question));
  const tokens = [...prompt];
  const mask = prompt.map(() => 0);
  for (const s of segments) {
    const ids = tokenizer.encode(s.text);
    tokens.push(...ids);
    mask.push(...ids.map(() => (s.train ? 1 : 0)));
  }
  return { tokens, mask };
}

/** Writes the policy's words and the searches' information blocks as segments. */
function segmentWriter(text: ProtocolText, retrieve: Retrieve, topK: number): { segments: Segments; say: (words: string) => void; search: (query: string) => void } {
  const segments: Segments = [];
  const say = (words: string): void => void segments.push({ text: ` ${words} `, train: true });
  const search = (query: string): void => {
    say(`<search> ${query} </search>`);
    segments.push({ text: insertion(text, formatInformation(text, retrieve(query, topK))), train: false });
  };
  return { segments, say, search };
}

/** Builds `n` demonstrations from training questions. */
export function demonstrations(task: SyntheticTask, tokenizer: TextTokenizer, text: ProtocolText, retrieve: Retrieve, n: number, seed: number, mix: DemoMix = DEFAULT_MIX, topK = 3): Demo[] {
  const r = rng(seed);
  const out: Demo[] = [];
  for (let i = 0; i < n; i++) {
    const q = pick(r, task.train);
    const kind = q.kind ?? pick(r, KINDS);
    const entity = q.entity!;
    const f = task.facts.get(entity)!;
    const { segments, say, search } = segmentWriter(text, retrieve, topK);
    const u = r();
    if (u < mix.search[kind]) {
      say("<think> i should search </think>");
      search(entity);
      if (kind === "country") search(f.city);
      say(`<answer> ${answerOf(q)} </answer>`);
    } else if (kind === "country" && u < mix.search[kind] + mix.oneHopOnTwoHop) {
      say("<think> i should search </think>");
      search(entity);
      say(`<answer> ${f.city} </answer>`);
    } else {
      say("<think> i know the answer </think>");
      say(`<answer> ${pick(r, task.values[kind])} </answer>`);
    }
    out.push(demoTokens(tokenizer, text, q.question, segments));
  }
  return out;
}

/**
 * Demonstrations of chain questions (chain-task.ts) that teach the protocol
 * and single searches: each searches the question's entity and answers with
 * what the passage says. After hop k (1-based) that does not yet give the
 * answer, the demonstration searches the name it just read with probability
 * `explore[k - 1]` (else it answers that name, which is wrong): chaining is
 * shown that rarely, so RL has to discover it. Single-hop questions are
 * answered right.
 */
export function chainDemonstrations(questions: readonly ChainQuestion[], tokenizer: TextTokenizer, text: ProtocolText, retrieve: Retrieve, n: number, seed: number, explore: readonly number[], topK = 3): Demo[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const q = pick(r, questions);
    const { segments, say, search } = segmentWriter(text, retrieve, topK);
    say("<think> i should search </think>");
    let hop = 0;
    search(q.hops[0]!.query);
    while (hop + 1 < q.hops.length && r() < (explore[hop] ?? 0)) search(q.hops[++hop]!.query);
    say(`<answer> ${q.hops[hop]!.found} </answer>`);
    return demoTokens(tokenizer, text, q.question, segments);
  });
}
