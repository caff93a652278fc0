/**
 * HotpotQA in its released JSON format: an array of
 * `{ _id, question, answer, context: [title, sentences[]][], supporting_facts?, type?, level? }`.
 * Loads questions with their golden answers, and a retrieval corpus built
 * from the context paragraphs of the selected questions, deduplicated by
 * title, as the reference Search-R1 setup did: one passage per title, its
 * text the paragraph's sentences joined.
 *
 * ```ts
 * const data = await loadHotpotQa({ train: "hotpot_train_v1.1.json", validation: "hotpot_dev_distractor_v1.json" },
 *   { train: 5000, validation: 200, seed: 1 });
 * Bm25Index.build(data.corpus);
 * ```
 *
 * With one file, the validation questions are drawn from it too, disjoint
 * from the training ones. Files past 256 MiB (the full training set is
 * ~540 MiB, more than one V8 string holds) are parsed element by element.
 */
import { readFile } from "node:fs/promises";
import { HearthError } from "../../../errors/index.js";
import { rng } from "./synthetic.js";

/** A file that cannot be read, is not JSON, is not an array, or holds a malformed entry; names the file. */
export class HotpotQaError extends HearthError {
  override name = "HotpotQaError";
  constructor(
    message: string,
    /** The file at fault. */
    readonly file: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}: ${message}`, options);
  }
}

/** One question. `golds` holds the golden answers (HotpotQA has one; a list is accepted too). */
export interface HotpotQaQuestion {
  id: string;
  question: string;
  golds: string[];
  /** "comparison" or "bridge", when the file says. */
  type?: string;
  /** "easy", "medium" or "hard", when the file says. */
  level?: string;
}

/** One corpus passage: a context paragraph. `id` is its title, unique within the corpus. */
export interface HotpotQaPassage {
  id: string;
  title: string;
  text: string;
}

/** What {@link loadHotpotQa} returns. */
export interface HotpotQaData {
  train: HotpotQaQuestion[];
  validation: HotpotQaQuestion[];
  /** Context paragraphs of all selected questions, first occurrence per title, train first. */
  corpus: HotpotQaPassage[];
}

/** Options of {@link loadHotpotQa}. */
export interface HotpotQaOptions {
  /** Training questions to select; default: all that are left after validation. */
  train?: number;
  /** Validation questions to select; default: all of a separate validation file, or 200 from a single file. */
  validation?: number;
  /** Seed of the selection (a seeded shuffle); default 0. */
  seed?: number;
  /** Files larger than this many bytes are parsed element by element; default 256 MiB. */
  chunkedParseAbove?: number;
}

/** The raw entry, as validated. */
interface Entry {
  id: string;
  question: string;
  golds: string[];
  context: Array<[string, string[]]>;
  type?: string;
  level?: string;
}

/**
 * Reads HotpotQA questions and builds the corpus. `files` is one JSON file
 * (validation drawn from it) or `{ train, validation? }`. Selection is a
 * seeded shuffle, so the same options give the same questions. Throws
 * {@link HotpotQaError} naming the file for an unreadable or malformed file,
 * and when more questions are asked for than a file holds.
 */
export async function loadHotpotQa(files: string | { train: string; validation?: string }, options: HotpotQaOptions = {}): Promise<HotpotQaData> {
  const { train: trainFile, validation: validationFile } = typeof files === "string" ? { train: files, validation: undefined } : files;
  const seed = options.seed ?? 0;
  const trainEntries = await readEntries(trainFile, options.chunkedParseAbove);
  let train: Entry[];
  let validation: Entry[];
  if (validationFile !== undefined) {
    const valEntries = await readEntries(validationFile, options.chunkedParseAbove);
    validation = take(shuffle(valEntries, seed + 1), options.validation ?? valEntries.length, validationFile, "validation");
    train = take(shuffle(trainEntries, seed), options.train ?? trainEntries.length, trainFile, "training");
  } else {
    const all = shuffle(trainEntries, seed);
    validation = take(all, options.validation ?? Math.min(200, Math.floor(all.length / 2)), trainFile, "validation");
    const rest = all.slice(validation.length);
    train = take(rest, options.train ?? rest.length, trainFile, "training", ` after ${validation.length} validation`);
  }
  const corpus: HotpotQaPassage[] = [];
  const titles = new Set<string>();
  for (const e of [...train, ...validation]) {
    for (const [title, sentences] of e.context) {
      if (titles.has(title)) continue;
      titles.add(title);
      corpus.push({ id: title, title, text: sentences.map((s) => s.trim()).filter((s) => s !== "").join(" ") });
    }
  }
  return { train: train.map(question), validation: validation.map(question), corpus };
}

function question(e: Entry): HotpotQaQuestion {
  const q: HotpotQaQuestion = { id: e.id, question: e.question, golds: e.golds };
  if (e.type !== undefined) q.type = e.type;
  if (e.level !== undefined) q.level = e.level;
  return q;
}

/** The first n entries; throws naming the file when n is invalid or too many. */
function take(entries: Entry[], n: number, file: string, what: string, after = ""): Entry[] {
  if (!Number.isInteger(n) || n < 0) throw new HotpotQaError(`the number of ${what} questions must be an integer ≥ 0, got ${n}`, file);
  if (n > entries.length) throw new HotpotQaError(`asked for ${n} ${what} questions, but only ${entries.length} are available${after}`, file);
  return entries.slice(0, n);
}

/** The entries in a seeded Fisher–Yates order. */
function shuffle(entries: Entry[], seed: number): Entry[] {
  const out = [...entries];
  const rand = rng(seed + 0x9e3779b9);
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}


async function readEntries(file: string, chunkedAbove = 256 * 1024 * 1024): Promise<Entry[]> {
  let buf: Buffer;
  try {
    buf = await readFile(file);
  } catch (err) {
    throw new HotpotQaError(`cannot read the file (${(err as NodeJS.ErrnoException).code ?? String(err)})`, file, { cause: err });
  }
  const raw = buf.length > chunkedAbove ? splitArray(buf, file) : parseWhole(buf, file);
  return raw.map((item, i) => checkEntry(item, i, file));
}

function parseWhole(buf: Buffer, file: string): unknown[] {
  let data: unknown;
  try {
    data = JSON.parse(buf.toString("utf8"));
  } catch (err) {
    throw new HotpotQaError(`not valid JSON (${(err as Error).message})`, file, { cause: err });
  }
  if (!Array.isArray(data)) throw new HotpotQaError(`expected a JSON array of questions, got ${kind(data)}`, file);
  return data;
}

/** Parses a top-level JSON array one element at a time, for files too large for one string. */
function splitArray(buf: Buffer, file: string): unknown[] {
  let i = 0;
  const skipSpace = (): void => {
    while (i < buf.length && (buf[i] === 0x20 || buf[i] === 0x0a || buf[i] === 0x0d || buf[i] === 0x09)) i++;
  };
  skipSpace();
  if (buf[i] !== 0x5b) throw new HotpotQaError(`expected a JSON array of questions, the file starts with ${JSON.stringify(String.fromCharCode(buf[i] ?? 32))}`, file);
  i++;
  const out: unknown[] = [];
  for (;;) {
    skipSpace();
    if (buf[i] === 0x5d) return out;
    const start = i;
    let depth = 0;
    let inString = false;
    for (; i < buf.length; i++) {
      const c = buf[i];
      if (inString) {
        if (c === 0x5c) i++;
        else if (c === 0x22) inString = false;
      } else if (c === 0x22) inString = true;
      else if (c === 0x7b || c === 0x5b) depth++;
      else if (c === 0x7d || c === 0x5d) {
        if (depth === 0) break;
        depth--;
      } else if (c === 0x2c && depth === 0) break;
    }
    if (i >= buf.length) throw new HotpotQaError(`not valid JSON (the array is not closed)`, file);
    try {
      out.push(JSON.parse(buf.toString("utf8", start, i)));
    } catch (err) {
      throw new HotpotQaError(`not valid JSON in entry ${out.length} (${(err as Error).message})`, file, { cause: err });
    }
    if (buf[i] === 0x2c) i++;
  }
}

function checkEntry(item: unknown, i: number, file: string): Entry {
  if (item === null || typeof item !== "object" || Array.isArray(item)) throw new HotpotQaError(`entry ${i} is ${kind(item)}, not an object`, file);
  const e = item as Record<string, unknown>;
  const where = typeof e._id === "string" ? `entry ${i} (_id ${e._id})` : `entry ${i}`;
  const bad = (msg: string): HotpotQaError => new HotpotQaError(`${where}: ${msg}`, file);
  if (typeof e._id !== "string") throw bad(`"_id" is missing or not a string`);
  if (typeof e.question !== "string") throw bad(`"question" is missing or not a string`);
  let golds: string[];
  if (typeof e.answer === "string") golds = [e.answer];
  else if (Array.isArray(e.answer) && e.answer.length > 0 && e.answer.every((a) => typeof a === "string")) golds = [...(e.answer as string[])];
  else throw bad(`"answer" is missing or not a string`);
  if (!Array.isArray(e.context)) throw bad(`"context" is missing or not an array of [title, sentences] pairs`);
  const context = e.context.map((pair: unknown, j: number): [string, string[]] => {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string" || !Array.isArray(pair[1]) || !pair[1].every((s) => typeof s === "string")) {
      throw bad(`"context"[${j}] is not a [title, sentences[]] pair`);
    }
    return [pair[0], pair[1] as string[]];
  });
  const entry: Entry = { id: e._id, question: e.question, golds, context };
  if (typeof e.type === "string") entry.type = e.type;
  if (typeof e.level === "string") entry.level = e.level;
  return entry;
}

function kind(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "an array" : typeof v === "object" ? "an object" : `a ${typeof v}`;
}
