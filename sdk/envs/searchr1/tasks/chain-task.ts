/**
 * The embedded default's task: questions that need one, two or three chained
 * searches over a fictional world. People are born in cities and work at
 * companies; cities lie in countries, countries in continents; companies are
 * based in cities. Each fact is stated only in a corpus passage, so a two-hop
 * question ("the birth country of X") needs a search for X, then a search for
 * the city named in X's passage; a three-hop one ("the birth continent of X")
 * then searches that city's country too. A search for a city or a country
 * also returns the passages of the people born there, the companies based
 * there and the cities in it: distractors that share the name. Held-out questions are about people that appear in no
 * training question, so only searching and reading can answer them.
 *
 * Each question carries its solution path (`hops`): the query of every search
 * and the value the passage it finds gives. The warm start demonstrates the
 * protocol and single searches on it and only rarely a second hop (bootstrap.ts),
 * so chaining searches is what RL has to discover.
 */
import { pick, rng, type Question } from "./synthetic.js";

/** The kinds of chain question, by the facts they chain. */
export type ChainKind = "born" | "country" | "continent" | "city-country" | "country-continent";

/**
 * Question templates: every one ends with "of <name> ?", so the entity sits at
 * the same place in every prompt and copying it into the first query is easy.
 */
export const CHAIN_TEMPLATES: Record<ChainKind, (name: string) => string> = {
  born: (n) => `what is the birthplace of ${n} ?`,
  country: (n) => `what is the birth country of ${n} ?`,
  continent: (n) => `what is the birth continent of ${n} ?`,
  "city-country": (n) => `what is the country of ${n} ?`,
  "country-continent": (n) => `what is the continent of ${n} ?`,
};

/**
 * How often each person-question kind is drawn (training and held-out alike).
 * One in six questions is a single search, two need two, three need three.
 */
export const PERSON_KIND_WEIGHTS: ReadonlyArray<[ChainKind, number]> = [
  ["born", 1],
  ["country", 2],
  ["continent", 3],
];

/** A chain question: its hops are the searches that answer it. */
export interface ChainQuestion extends Question {
  chainKind: ChainKind;
  /** The solution path: hop k searches `query` and reads `found`; the last `found` is the answer. */
  hops: Array<{ query: string; found: string }>;
}

/** A generated chain task. */
export interface ChainTask {
  corpus: Array<{ title: string; text: string }>;
  train: ChainQuestion[];
  heldOut: ChainQuestion[];
  /** Single-search questions about cities and countries (warm start only). */
  entityQuestions: ChainQuestion[];
  /** Every word the task can produce (for a word-level vocabulary). */
  words: string[];
}

/** Options of the generator. */
export interface ChainOptions {
  seed?: number;
  /** People in the world; the last `heldOut` of them appear only in held-out questions. */
  people?: number;
  heldOut?: number;
}

const ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "th", "sh", "gl"];
const VOWELS = ["a", "e", "i", "o", "u", "ai", "ei", "ou"];
const CODAS = ["", "n", "r", "l", "s", "th", "x", "m", "v", "k"];

function names(r: () => number, n: number, taken: Set<string>): string[] {
  const out: string[] = [];
  while (out.length < n) {
    const w = pick(r, ONSETS) + pick(r, VOWELS) + pick(r, ONSETS) + pick(r, VOWELS) + pick(r, CODAS);
    if (taken.has(w) || w.length < 4) continue;
    taken.add(w);
    out.push(w);
  }
  return out;
}

/** A chain question's category (what evaluations break held-out EM down by): the searches it needs. */
export function hopCategory(hops: number): string {
  return `${hops} hop${hops === 1 ? "" : "s"}`;
}

/** Expands weights into a repeating list of kinds. */
function weighted(weights: ReadonlyArray<[ChainKind, number]>): ChainKind[] {
  return weights.flatMap(([k, n]) => Array.from({ length: n }, () => k));
}

/** Generates the task (the same world for the same options on every machine). */
export function chainTask(opts: ChainOptions = {}): ChainTask {
  const r = rng(opts.seed ?? 1);
  const nPeople = opts.people ?? 1200;
  const nHeld = opts.heldOut ?? 200;
  if (nHeld >= nPeople) throw new RangeError(`heldOut (${nHeld}) must be below people (${nPeople})`);
  const taken = new Set<string>();
  const continents = names(r, 5, taken);
  const countries = names(r, 12, taken);
  const cities = names(r, 36, taken);
  const companies = names(r, 24, taken);
  const people = names(r, nPeople, taken);
  const continent = new Map(countries.map((k) => [k, pick(r, continents)]));
  const country = new Map(cities.map((c) => [c, pick(r, countries)]));
  const base = new Map(companies.map((e) => [e, pick(r, cities)]));
  const facts = new Map(people.map((p) => [p, { city: pick(r, cities), employer: pick(r, companies) }]));
  // Every passage a hop reads states the next name after "in"; a person's employer and the
  // companies based in a city are there to be read past (they share names with the chain).
  const corpus = [
    ...people.map((p) => ({ title: p, text: `${p} was born in ${facts.get(p)!.city} . ${p} works at ${facts.get(p)!.employer} .` })),
    ...cities.map((c) => ({ title: c, text: `${c} is a city in ${country.get(c)!} .` })),
    ...countries.map((k) => ({ title: k, text: `${k} is a country in ${continent.get(k)!} .` })),
    ...companies.map((e) => ({ title: e, text: `${e} is a company based in ${base.get(e)!} .` })),
  ];
  const hopsOf = (kind: ChainKind, name: string): ChainQuestion["hops"] => {
    if (kind === "city-country") return [{ query: name, found: country.get(name)! }];
    if (kind === "country-continent") return [{ query: name, found: continent.get(name)! }];
    const city = facts.get(name)!.city;
    const k = country.get(city)!;
    const chain = [{ query: name, found: city }, { query: city, found: k }, { query: k, found: continent.get(k)! }];
    return chain.slice(0, kind === "born" ? 1 : kind === "country" ? 2 : 3);
  };
  const question = (kind: ChainKind, name: string, i: number): ChainQuestion => {
    const hops = hopsOf(kind, name);
    return { id: `${kind}-${name}-${i}`, question: CHAIN_TEMPLATES[kind](name), golds: [hops.at(-1)!.found], entity: name, chainKind: kind, hops, category: hopCategory(hops.length) };
  };
  const kinds = weighted(PERSON_KIND_WEIGHTS);
  const trainPeople = people.slice(0, nPeople - nHeld);
  const train = trainPeople.flatMap((p, i) => kinds.map((k) => question(k, p, i)));
  const heldOut = people.slice(nPeople - nHeld).map((p, i) => question(kinds[i % kinds.length]!, p, i));
  const entityQuestions = [...cities.map((c, i) => question("city-country", c, i)), ...countries.map((k, i) => question("country-continent", k, i))];
  const words = new Set<string>();
  for (const t of [...corpus.map((c) => `${c.title} ${c.text}`), ...Object.values(CHAIN_TEMPLATES).map((f) => f("x"))]) for (const w of t.split(" ")) words.add(w);
  words.delete("x");
  return { corpus, train, heldOut, entityQuestions, words: [...words].sort() };
}
