/**
 * The bootstrap: a short supervised warm start of the tiny model on generated
 * demonstrations that mix good and poor search behaviour, so that RL starts
 * from a policy that knows the protocol but searches only sometimes (held-out
 * EM near 15–30 %). What RL then has to learn is when and what to search.
 */
import { buildPrompt, formatInformation, insertion, type ProtocolText, type Retrieve } from "./protocol.js";
import { KINDS, pick, rng, type Question, type QuestionKind, type SyntheticTask } from "./synthetic.js";
import type { TextTokenizer } from "./tokenizer.js";

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
export interface Demo {
  tokens: number[];
  mask: number[];
}

function answerOf(q: Question): string {
  return q.golds[0]!;
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
    const segments: Array<{ text: string; train: boolean }> = [];
    const say = (words: string): void => void segments.push({ text: ` ${words} `, train: true });
    const search = (query: string): void => {
      say(`<search> ${query} </search>`);
      segments.push({ text: insertion(text, formatInformation(text, retrieve(query, topK))), train: false });
    };
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
    const prompt = tokenizer.encode(buildPrompt(tokenizer, text, q.question));
    const tokens = [...prompt];
    const mask = prompt.map(() => 0);
    for (const s of segments) {
      const ids = tokenizer.encode(s.text);
      tokens.push(...ids);
      mask.push(...ids.map(() => (s.train ? 1 : 0)));
    }
    out.push({ tokens, mask });
  }
  return out;
}
