/**
 * The Search-R1 environment in the layer's episode loop (runEpisodes), against
 * a scripted engine (a fake at the engine interface): stop strings, masks,
 * the tool-call limit, invalid actions and length limits.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { formatInformation, informationBlock, insertion, parseSearch } from "../../sdk/envs/searchr1/protocol.js";
import { SearchR1Environment } from "../../sdk/envs/searchr1/environment.js";
import { runEpisodes, type EpisodeRow } from "../../sdk/rl/episodes.js";
import { ScriptedEngine } from "../helpers/scripted-engine.js";
import { PROTOCOL_WORDS, SYNTHETIC_TEXT as TEXT } from "../../sdk/envs/searchr1/recipes/synthetic.js";
import { tokenizerFromJson, wordTokenizerJson } from "../../sdk/rl/text/tokenizer.js";

const tok = tokenizerFromJson(wordTokenizerJson([...PROTOCOL_WORDS, "zorvath", "was", "born", "in", "meridel", "where", "?", "paris", "."]));

const ZORVATH = [{ title: "zorvath", text: "zorvath was born in meridel ." }];
const retrieve = (q: string) => (q === "zorvath" ? ZORVATH : []);
/** The environment over a one-passage corpus: "zorvath" finds it, "paris" nothing. */
const env = SearchR1Environment.local(TEXT, ZORVATH, 3);
const rows = (...prompts: number[][]): EpisodeRow[] => prompts.map((prompt, i) => ({ prompt, state: null, label: `q${i}#0` }));

test("a search is answered with retrieved passages, masked out, and generation resumes on the same session", async () => {
  const engine = new ScriptedEngine(tok, ["</search>", "</answer>"], [["<think> i should search </think> <search> zorvath </search>", "<answer> meridel </answer>"]]);
  const prompt = tok.encode("where was zorvath born ?");
  const [e] = await runEpisodes(engine, tok, env, rows(prompt), { seed: 3 });
  assert.equal(e!.finish, "answer");
  assert.deepEqual(e!.calls, ["zorvath"]);
  assert.ok(e!.response.includes(tok.decode(tok.encode(formatInformation(TEXT, retrieve("zorvath"))))), e!.response);
  assert.match(e!.response, /<answer> meridel <\/answer>$/);
  // Mask: 0 on the prompt, 1 on both generated turns, 0 on the inserted information.
  const info = tok.encode(insertion(TEXT, formatInformation(TEXT, retrieve("zorvath"))));
  const turn1 = tok.encode("<think> i should search </think> <search> zorvath </search>");
  const turn2 = tok.encode("<answer> meridel </answer>");
  assert.deepEqual([...e!.mask], [...prompt.map(() => 0), ...turn1.map(() => 1), ...info.map(() => 0), ...turn2.map(() => 1)]);
  assert.equal(e!.tokens.length, e!.mask.length);
  assert.deepEqual([...e!.logprobs].filter((x, i) => e!.mask[i] === 0 && x !== 0), [], "inserted tokens carry no logprob");
  assert.deepEqual(engine.calls.map((c) => c.op), ["generate", "resume", "release"]);
  assert.deepEqual(engine.calls[1]!.appended, [info], "only the information block is appended; the cache holds the rest");
  assert.deepEqual(engine.calls[0]!.sampling.stop, ["</search>", "</answer>"]);
  assert.notEqual(engine.calls[1]!.sampling.seed, engine.calls[0]!.sampling.seed, "each turn samples with its own seed");
});

test("searches beyond the limit get a corrective message; an unusable query is an invalid action", async () => {
  const engine = new ScriptedEngine(tok, ["</search>", "</answer>"], [
    ["<search> zorvath </search>", "<search> zorvath </search>", "<search> paris </search>", "<answer> meridel </answer>"],
    ["<search> </search>", "<answer> paris </answer>"],
  ]);
  const p = tok.encode("where was zorvath born ?");
  const [a, b] = await runEpisodes(engine, tok, env, rows(p, p), { maxToolCalls: 2 });
  assert.deepEqual(a!.calls, ["zorvath", "zorvath"], "the third search was refused");
  assert.ok(a!.response.includes(tok.decode(tok.encode(informationBlock(TEXT, TEXT.limit)))), a!.response);
  assert.equal(a!.finish, "answer");
  assert.deepEqual(b!.calls, []);
  assert.ok(b!.response.includes(tok.decode(tok.encode(informationBlock(TEXT, TEXT.invalid)))), b!.response);
  assert.equal(parseSearch("<search>  </search>"), null);
  assert.equal(parseSearch("x <search> a </search> y <search> b c </search>"), "b c");
  assert.equal(formatInformation(TEXT, []), informationBlock(TEXT, TEXT.empty));
});

test("a turn that ends without a stop string, or a response over its budget, ends the episode", async () => {
  const engine = new ScriptedEngine(tok, ["</search>", "</answer>"], [["<think> i know"], ["<search> zorvath </search>", "<answer> meridel </answer>"]]);
  const p = tok.encode("where was zorvath born ?");
  const [cut, long] = await runEpisodes(engine, tok, env, rows(p, p), { maxResponseTokens: 12 });
  assert.equal(cut!.finish, "length");
  assert.equal(long!.finish, "length", "the information block would not fit in 12 response tokens");
  assert.deepEqual(long!.calls, [], "a search whose results cannot be shown is not counted");
  assert.ok(!long!.response.includes("<information>"), "nothing is appended past the budget");
});
