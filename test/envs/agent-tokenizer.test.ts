/**
 * The agent policies' tokenizer: it loads through the same code as a model
 * folder's (template, eos ids), decodes exactly what it encoded (rendered
 * conversations, arbitrary unicode, text that holds pieces of added
 * tokens), writes every number to 9,999 and every name as one id wherever
 * it stands, gives the engine's stop-string vocabulary each id's exact
 * bytes, and falls back to bytes (never an unknown) for words it lacks.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { byteLevelVocab, type TokenizerJson } from "../../sdk/tensor/vocab.js";
import { QWEN25_CHAT_TEMPLATE } from "../../sdk/rl/text/qwen-template.js";
import { tokenizerFromFiles } from "../../sdk/rl/text/tokenizer.js";
import { addedSections, agentTokenizerFiles, pieces } from "../../sdk/envs/agent/agent-tokenizer.js";
import { GENERATION_PROMPT, RESPONSE_CLOSE, RESPONSE_OPEN, TOOLS_TAIL } from "../../sdk/envs/agent/chat-format.js";
import { episodePieces } from "../../sdk/envs/agent/conversation.js";
import { prepareAgentCalc } from "../../sdk/envs/agent/recipes/calculator.js";
import { prepareAgentChain } from "../../sdk/envs/agent/recipes/chain.js";
import { agentDemonstrations } from "../../sdk/envs/agent/recipes/common.js";
import { CALC_TOOL, SEARCH_TOOL } from "../../sdk/envs/agent/tools.js";

const calc = prepareAgentCalc({ data: "synthetic", evalSize: 200 });
const chain = prepareAgentChain({ data: "synthetic", evalSize: 200 });
const tok = calc.tokenizer;

test("the files load as a model folder's: Qwen2.5's template, <|im_end|> and <|endoftext|> as eos, nothing added when encoding", () => {
  const t = tokenizerFromFiles(agentTokenizerFiles(["crate", "apples"]));
  assert.equal(t.template?.source, QWEN25_CHAT_TEMPLATE);
  assert.equal(t.prompt, "chat-template");
  const [imEnd] = t.encode("<|im_end|>");
  const [eot] = t.encode("<|endoftext|>");
  assert.deepEqual(t.eosIds, [imEnd, eot].sort((a, b) => a! - b!));
  assert.deepEqual(t.encode("crate"), t.encode("crate"), "deterministic");
  assert.equal(t.encode("crate").length, 1, "a word of the vocabulary is one id");
  const config = JSON.parse(Buffer.from(t.files["tokenizer_config.json"]!).toString());
  assert.equal(config.eos_token, "<|im_end|>");
  assert.equal(config.pad_token, "<|endoftext|>");
  assert.equal(config.clean_up_tokenization_spaces, false, "decode must not touch spaces before punctuation");
});

test("decode(encode(x)) is x for every rendered conversation of both tasks and for arbitrary text", () => {
  for (const task of [calc, chain]) {
    const demos = agentDemonstrations(task.extra.train, task.extra.variants, [1, 1], task.tokenizer, 64, 3);
    for (const d of demos) {
      const text = task.tokenizer.decode(d.tokens);
      assert.equal(task.tokenizer.decode(task.tokenizer.encode(text)), text);
    }
  }
  const odd = [
    "héllo wörld — ünïcode ☃ 😀 日本語 \u0000\u0001\t\r\n  trailing  ",
    "  leading spaces and  double  spaces . , ; ' \" {}[]",
    '<tool_call> half <tool_ca <|im_end <|im_start|>user\n<tool_response> "}\n</tool_call',
    "12345678901234567890 007 -5 3.14 1e9",
    "\n\n# Tools\n\nYou may call",
    "zzqxj is no word",
  ];
  for (const x of odd) for (const t of [tok, chain.tokenizer]) assert.equal(t.decode(t.encode(x)), x, JSON.stringify(x));
});

test("every number to 9,999 is one id, the same in a question, a call's arguments, a tool result and an answer", () => {
  for (let n = 0; n <= 9999; n++) assert.equal(tok.encode(String(n)).length, 1, `${n}`);
  const [id37] = tok.encode("37");
  const [id1776] = tok.encode("1776");
  const inQuestion = tok.encode("A crate holds 37 boxes of 48 apples.");
  const inCall = tok.encode('{"expression": "37 * 48"}');
  const inResult = tok.encode(`${RESPONSE_OPEN}1776${RESPONSE_CLOSE}`);
  const inAnswer = tok.encode("1776<|im_end|>");
  assert.ok(inQuestion.includes(id37!) && inCall.includes(id37!));
  assert.ok(inResult.includes(id1776!) && inAnswer[0] === id1776);
});

test("a chain name is one id in the question, the query, the passage and the answer (no leading space on words)", () => {
  const t = chain.tokenizer;
  const q = chain.heldOut[0]!;
  const name = q.question.replace(/\?$/, "").split(" ").at(-1)!;
  const [id] = t.encode(name);
  assert.equal(t.encode(name).length, 1);
  assert.ok(t.encode(q.question).includes(id!));
  assert.ok(t.encode(`{"query": "${name}"}`).includes(id!));
  assert.ok(t.encode(`${name} was born in x.`).includes(id!) && t.encode(`x was born in ${name}.`).includes(id!));
});

test("the vocabulary covers what the tasks say: every piece of a conversation is one id (no byte fallback)", () => {
  for (const task of [calc, chain]) {
    const [d] = agentDemonstrations(task.extra.train, task.extra.variants, [1, 1], task.tokenizer, 1, 9);
    const text = task.tokenizer.decode(d!.tokens);
    const added = addedSections(text).filter((s) => s.added).length;
    assert.equal(task.tokenizer.encode(text).length, pieces(text).length + added);
  }
});

test("the template's fixed text is one token each, matched leftmost-longest", () => {
  for (const s of [RESPONSE_OPEN, RESPONSE_CLOSE, GENERATION_PROMPT, TOOLS_TAIL]) assert.equal(tok.encode(s).length, 1, JSON.stringify(s));
  // "<|im_end|>" alone (a sampled end of turn) stays the special token, not a longer glue token.
  assert.deepEqual(tok.encode("1776<|im_end|>").map((i) => tok.decode([i])), ["1776", "<|im_end|>"]);
  // A rendered prompt ends with the generation prompt as one id, whatever the tool JSON before it.
  const p = episodePieces({ question: "A crate holds 3 boxes of 4 apples.", tools: [CALC_TOOL, SEARCH_TOOL], turns: [], answer: "12" })[0]!.text;
  assert.equal(tok.decode(tok.encode(p).slice(-1)), GENERATION_PROMPT);
});

test("the engine's stop-string vocabulary gives every id its exact bytes", () => {
  const json = JSON.parse(Buffer.from(tok.files["tokenizer.json"]!).toString()) as TokenizerJson;
  const vocab = byteLevelVocab(json, tok.size);
  assert.deepEqual(tok.pieces().map((p) => Buffer.from(p).toString("hex")), vocab.map((p) => Buffer.from(p).toString("hex")));
  for (const x of ["é 😀 <|im_end|>37", calc.tokenizer.decode(agentDemonstrations(calc.extra.train, calc.extra.variants, [1, 1], tok, 1, 4)[0]!.tokens)]) {
    const ids = tok.encode(x);
    assert.equal(Buffer.concat(ids.map((i) => vocab[i]!)).toString("utf8"), x);
  }
  let checked = 0;
  for (let id = 0; id < tok.size; id++) {
    const text = tok.decode([id]);
    if (text.includes("\uFFFD")) continue; // a lone byte of a multi-byte character
    assert.equal(Buffer.from(vocab[id]!).toString("utf8"), text, `id ${id}`);
    checked++;
  }
  assert.ok(checked > tok.size - 200, `most ids are whole characters (${checked} of ${tok.size})`);
});

test("a word the vocabulary lacks falls back to its bytes, never to an unknown id", () => {
  const ids = tok.encode("zzqxj");
  assert.equal(ids.length, 5);
  assert.ok(ids.every((i) => i < 256), "byte ids");
  assert.equal(tok.decode(ids), "zzqxj");
});
