/**
 * The self-contained task of the embedded default: fictional people, cities,
 * countries, jobs and companies, with their facts stated only in corpus
 * passages. Questions are one-hop (X's birthplace, job, employer) or two-hop
 * (X's birth country: search X, then search X's city). Held-out questions are about people that appear in
 * no training question, so memorising answers cannot help: the policy must
 * search and read.
 */

import type { TaskItem } from "../../../rl/types.js";

/** A passage of the corpus. */
export interface Passage {
  title: string;
  text: string;
}

/** The kinds of synthetic question. */
export type QuestionKind = "born" | "job" | "employer" | "country";

/** A question with its gold answers. */
export interface Question extends TaskItem {
  kind?: QuestionKind;
  /** The entity asked about (synthetic only). */
  entity?: string;
}

/** A generated task. */
export interface SyntheticTask {
  corpus: Passage[];
  train: Question[];
  heldOut: Question[];
  /** Every word the task can produce (for a word-level vocabulary). */
  words: string[];
  /** Facts by person, for demonstrations. */
  facts: Map<string, { city: string; job: string; employer: string; country: string }>;
  /** Values an answer of each kind can take (for plausible wrong guesses). */
  values: Record<QuestionKind, string[]>;
}

/** Options of the generator. */
export interface SyntheticOptions {
  seed?: number;
  /** People in the world; the last `heldOut` of them appear only in held-out questions. */
  people?: number;
  heldOut?: number;
}

export { pick, rng } from "../../../rl/random.js";
import { pick, rng } from "../../../rl/random.js";

const ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "th", "sh", "gl"];
const VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"];
const CODAS = ["", "n", "r", "l", "s", "th", "x", "m", "v", "k"];
const JOBS = ["baker", "pilot", "farmer", "painter", "doctor", "teacher", "sailor", "miner", "weaver", "potter", "lawyer", "chemist", "drummer", "tailor", "builder", "singer", "writer", "nurse", "fisher", "jeweler"];

function names(r: () => number, n: number, taken: Set<string>, syllables: number): string[] {
  const out: string[] = [];
  while (out.length < n) {
    let w = "";
    for (let s = 0; s < syllables; s++) w += pick(r, ONSETS) + pick(r, VOWELS) + (s === syllables - 1 ? pick(r, CODAS) : "");
    if (taken.has(w) || w.length < 4) continue;
    taken.add(w);
    out.push(w);
  }
  return out;
}

/**
 * Question templates by kind. Every template ends with "of <name> ?" and
 * differs in one word, so the entity sits at the same place in every prompt:
 * a tiny model learns to copy it into a query within a short warm start.
 */
export const TEMPLATES: Record<QuestionKind, (name: string) => string> = {
  born: (n) => `what is the birthplace of ${n} ?`,
  job: (n) => `what is the job of ${n} ?`,
  employer: (n) => `what is the employer of ${n} ?`,
  country: (n) => `what is the birth country of ${n} ?`,
};

/** The kinds, in a fixed order. */
export const KINDS: readonly QuestionKind[] = ["born", "job", "employer", "country"];

/** Generates the task. */
export function syntheticTask(opts: SyntheticOptions = {}): SyntheticTask {
  const seed = opts.seed ?? 1;
  const r = rng(seed);
  const nPeople = opts.people ?? 600;
  const nHeld = opts.heldOut ?? 200;
  if (nHeld >= nPeople) throw new RangeError(`heldOut (${nHeld}) must be below people (${nPeople})`);
  const taken = new Set<string>(JOBS);
  const countries = names(r, 10, taken, 2);
  const cities = names(r, 30, taken, 2);
  const companies = names(r, 20, taken, 2);
  const people = names(r, nPeople, taken, 2);
  const cityCountry = new Map(cities.map((c) => [c, pick(r, countries)]));
  const facts = new Map<string, { city: string; job: string; employer: string; country: string }>();
  const corpus: Passage[] = [];
  for (const p of people) {
    const city = pick(r, cities);
    const f = { city, job: pick(r, JOBS), employer: pick(r, companies), country: cityCountry.get(city)! };
    facts.set(p, f);
    corpus.push({ title: p, text: `${p} was born in ${f.city} . ${p} works as a ${f.job} at ${f.employer} .` });
  }
  for (const c of cities) corpus.push({ title: c, text: `${c} is a city in ${cityCountry.get(c)} .` });
  const answer = (kind: QuestionKind, p: string): string => {
    const f = facts.get(p)!;
    return kind === "born" ? f.city : kind === "job" ? f.job : kind === "employer" ? f.employer : f.country;
  };
  const question = (kind: QuestionKind, p: string, i: number): Question => ({
    id: `${kind}-${p}-${i}`,
    question: TEMPLATES[kind](p),
    golds: [answer(kind, p)],
    kind,
    entity: p,
  });
  const trainPeople = people.slice(0, nPeople - nHeld);
  const heldPeople = people.slice(nPeople - nHeld);
  const train = trainPeople.flatMap((p, i) => KINDS.map((k) => question(k, p, i)));
  const heldOut = heldPeople.map((p, i) => question(KINDS[i % KINDS.length]!, p, i));
  const words = new Set<string>();
  for (const t of [...corpus.map((c) => `${c.title} ${c.text}`), ...KINDS.map((k) => TEMPLATES[k]("x"))]) for (const w of t.split(" ")) words.add(w);
  words.delete("x");
  return {
    corpus,
    train,
    heldOut,
    words: [...words].sort(),
    facts,
    values: { born: cities, job: JOBS, employer: companies, country: countries },
  };
}
