/**
 * The agent tasks' demonstrations are what the agent endpoint will see:
 * their text is Qwen2.5's template rendering of the episode's messages
 * (each request's prompt extends the previous prompt plus the sampled
 * turn), their tokens are each piece encoded alone, and mask 1 covers
 * exactly the turns the policy samples (each ending with `<|im_end|>`),
 * never the prompt or a tool result. They show the first call always and
 * chain further calls as often as the explore rates say.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { rng } from "../../sdk/rl/random.js";
import { IM_END, renderAgentChat, toolCallText, templateJson, toolResponses } from "../../sdk/envs/agent/chat-format.js";
import { drawPrompt, episodeDemo, episodeMessages, episodePieces, exploringScript, type EpisodeScript } from "../../sdk/envs/agent/conversation.js";
import { AGENT_CALC_ANSWER_LEAD, prepareAgentCalc } from "../../sdk/envs/agent/recipes/calculator.js";
import { prepareAgentChain } from "../../sdk/envs/agent/recipes/chain.js";
import { agentDemonstrations } from "../../sdk/envs/agent/recipes/common.js";
import { CALC_TOOL, TOOL_VARIANTS } from "../../sdk/envs/agent/tools.js";

const calc = prepareAgentCalc({ data: "synthetic", evalSize: 20 });
const chain = prepareAgentChain({ data: "synthetic", evalSize: 20 });
const tok = calc.tokenizer;

/** The scripts of drawn demonstrations (the same draws agentDemonstrations makes, kept as scripts). */
function scripts(task: typeof calc, n: number, explore: readonly number[], seed: number): EpisodeScript[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const q = task.extra.train[Math.floor(r() * task.extra.train.length)]!;
    return exploringScript(r, q.item.question, q.path, explore, drawPrompt(r, task.extra.variants));
  });
}

test("a demonstration's text is the template's rendering of its messages, and each request's prompt extends the last one plus the sampled turn", () => {
  for (const task of [calc, chain]) {
    for (const s of scripts(task, 24, [1, 1], 11)) {
      const demo = episodeDemo(task.tokenizer, s);
      const messages = episodeMessages(s);
      // The whole episode as the template renders it after the answer (it closes the turn with "\n").
      assert.equal(task.tokenizer.decode(demo.tokens) + "\n", renderAgentChat(messages, s.tools, false));
      // Request k's prompt: the messages up to the k-th tool results, with the generation prompt.
      const parts = episodePieces(s);
      let text = parts[0]!.text;
      let upto = messages.findIndex((m) => m.role === "user") + 1;
      assert.equal(renderAgentChat(messages.slice(0, upto), s.tools), text, "the first prompt");
      for (let k = 0; k < s.turns.length; k++) {
        text += parts[1 + 2 * k]!.text + parts[2 + 2 * k]!.text;
        upto += 1 + s.turns[k]!.results.length;
        assert.equal(renderAgentChat(messages.slice(0, upto), s.tools), text, `request ${k + 2} extends request ${k + 1}`);
      }
    }
  }
});

test("tokens are each piece encoded alone, and mask 1 covers exactly the sampled turns", () => {
  const [imEnd] = tok.encode(IM_END);
  for (const s of scripts(calc, 24, [0.5, 0.5], 12)) {
    const demo = episodeDemo(tok, s);
    const parts = episodePieces(s);
    assert.deepEqual(demo.tokens, parts.flatMap((p) => tok.encode(p.text)));
    // The trained runs, in order, are the call turns and the answer; each ends with <|im_end|>.
    const runs: number[][] = [];
    demo.mask.forEach((m, i) => {
      if (m === 1 && (i === 0 || demo.mask[i - 1] === 0)) runs.push([]);
      if (m === 1) runs.at(-1)!.push(demo.tokens[i]!);
    });
    assert.deepEqual(runs.map((r) => tok.decode(r)), parts.filter((p) => p.train).map((p) => p.text));
    for (const r of runs) assert.equal(r.at(-1), imEnd);
    // Nothing the template renders is trained: the prompt and every tool-results turn are 0.
    let at = 0;
    for (const p of parts) {
      const n = tok.encode(p.text).length;
      assert.ok(demo.mask.slice(at, at + n).every((m) => m === (p.train ? 1 : 0)), JSON.stringify(p.text.slice(0, 40)));
      at += n;
    }
  }
});

test("a call is written as the template writes it (json.dumps separators), and its results turn is the template's", () => {
  const args = { expression: 'a "quoted" \\ é 😀' };
  const rendered = renderAgentChat([{ role: "user", content: "q" }, { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "calc", arguments: args } }] }, { role: "tool", content: "1" }, { role: "tool", content: "2" }], [CALC_TOOL]);
  assert.ok(rendered.includes(`<|im_start|>assistant\n${toolCallText("calc", args)}${IM_END}${toolResponses(["1", "2"])}`));
  assert.equal(templateJson({ a: [1, "x", null, true], b: {} }), '{"a": [1, "x", null, true], "b": {}}');
});

test("demonstrations always make the first call and chain only as often as explore says; the answer is the last result read", () => {
  const three = calc.extra.train.filter((q) => q.path.length === 3);
  for (const s of scripts({ ...calc, extra: { ...calc.extra, train: three } }, 50, [0, 0], 13)) {
    assert.equal(s.turns.length, 1);
    assert.equal(s.answer, AGENT_CALC_ANSWER_LEAD + s.turns[0]!.results[0]);
  }
  const counts = [0, 0, 0, 0];
  for (const s of scripts({ ...calc, extra: { ...calc.extra, train: three } }, 2000, [0.3, 0.6], 14)) counts[s.turns.length]!++;
  assert.ok(Math.abs(counts[1]! / 2000 - 0.7) < 0.04, `stops after one call 70 % of the time: ${counts}`);
  assert.ok(Math.abs(counts[3]! / 2000 - 0.18) < 0.04, `reaches the third call 18 % of the time: ${counts}`);
  const full = scripts({ ...calc, extra: { ...calc.extra, train: three } }, 5, [1, 1], 15);
  for (const s of full) assert.equal(s.answer, AGENT_CALC_ANSWER_LEAD + s.turns[2]!.results[0], "the full path ends at the gold");
});

test("a calculator answer begins with the same token on every demonstration, before the copied number, and exact match takes it", () => {
  // The choice between answering and calling again is one fixed token against `<tool_call>`, made before the copy.
  const [lead] = tok.encode(AGENT_CALC_ANSWER_LEAD);
  const [callOpen] = tok.encode("<tool_call>");
  assert.notEqual(lead, callOpen);
  for (const s of scripts(calc, 64, [0.5, 0.5], 18)) {
    const ids = tok.encode(episodePieces(s).at(-1)!.text);
    assert.equal(ids[0], lead, JSON.stringify(s.answer));
    assert.equal(tok.decode(ids.slice(1, -1)), s.answer.slice(AGENT_CALC_ANSWER_LEAD.length), "then the number, as one token");
    assert.equal(ids.length, 3);
    assert.equal(calc.environment.reward(s.answer, [s.answer.trim()]), 1, "exact match trims the lead");
  }
});

test("first prompts vary: no system message or one of the recipe's, the AI SDK's tool JSON or another agent's", () => {
  const r = rng(16);
  const seen = new Set<string>();
  for (let i = 0; i < 400; i++) seen.add(JSON.stringify(drawPrompt(r, calc.extra.variants)));
  assert.equal(seen.size, (calc.extra.variants.systems.length + 1) * TOOL_VARIANTS.calc.length);
  const demos = agentDemonstrations(calc.extra.train, calc.extra.variants, [0.3, 0.6], tok, 64, 17);
  assert.equal(new Set(demos.map((d) => tok.decode(d.tokens.slice(0, d.tokens.indexOf(tok.encode("<|im_start|>user\n")[0]!))))).size > 4, true);
});

test("the calculator's demonstrations come from fresh questions: the pool begins with the training questions, holds no held-out one, and is what demonstrations draw", () => {
  const task = prepareAgentCalc({ data: "synthetic", evalSize: 200 });
  const pool = task.extra.demoPool!.questions;
  const { train } = task.extra;
  assert.equal(pool.length, 76_800);
  assert.deepEqual(pool.slice(0, train.length), train);
  const factors = (text: string) => {
    const m = /holds (\d+) \w+ of (\d+)/.exec(text)!;
    return [Number(m[1]), Number(m[2])].sort((a, b) => a - b).join("x");
  };
  const held = new Set(task.heldOut.map((q) => factors(q.question)));
  assert.equal(held.size > 100, true);
  assert.equal(pool.filter((q) => held.has(factors(q.item.question))).length, 0, "no demonstration question multiplies a held-out pair");
  // 256 demonstrations from the pool: most are of questions past the training ones (1 in 32 would be a training one).
  const questions = new Set(train.map((q) => q.item.question));
  const demos = agentDemonstrations(pool, { systems: [], tools: [[]] }, [0, 0], task.tokenizer, 256, 7);
  const decoded = demos.map((d) => task.tokenizer.decode(d.tokens));
  const fresh = decoded.filter((t) => ![...questions].some((q) => t.includes(q))).length;
  assert.ok(fresh > 200, `${fresh} of 256 demonstrations are of fresh questions`);
});
