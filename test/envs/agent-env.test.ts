/**
 * The agent tasks on the environment path, in the layer's episode loop
 * against a scripted engine: the prompt is the template's rendering of the
 * AI SDK's request; a call turn stops at `<|im_end|>` and is answered with
 * exactly the tool-results turn the template renders, masked, so the
 * episode's tokens and mask are those of the same episode's demonstration
 * (the endpoint's cut); a turn without a valid call ends the episode. The
 * tool-call parser, the tools and the reward on both answer forms.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { runEpisodes } from "../../sdk/rl/episodes.js";
import { loadEnvironment } from "../../sdk/rl/environment.js";
import { ScriptedEngine } from "../helpers/scripted-engine.js";
import { IM_END, answerTurn, callTurn, renderAgentChat, toolResponses } from "../../sdk/envs/agent/chat-format.js";
import { episodeDemo, promptText } from "../../sdk/envs/agent/conversation.js";
import { AgentCalcEnvironment, AgentChainEnvironment, CALLS_EXHAUSTED } from "../../sdk/envs/agent/environment.js";
import { prepareAgentCalc } from "../../sdk/envs/agent/recipes/calculator.js";
import { prepareAgentChain } from "../../sdk/envs/agent/recipes/chain.js";
import { AGENT_CALC_ENVIRONMENT, AGENT_CHAIN_ENVIRONMENT, agentAnswer, agentCalcReward, agentChainReward } from "../../sdk/envs/agent/reward.js";
import { parseToolCalls } from "../../sdk/envs/agent/tool-calls.js";
import { CALC_TOOL, SEARCH_TOOL, chainSearch, runCalc } from "../../sdk/envs/agent/tools.js";
import { agentCalculator, agentChain } from "../../sdk/envs/agent/package.js";

const calc = prepareAgentCalc({ data: "synthetic", evalSize: 20 });
const tok = calc.tokenizer;
const env = new AgentCalcEnvironment();
const prompt = (question: string) => {
  const start = env.reset({ id: "q", question, golds: [] });
  return tok.encode(tok.chat(start.system, start.user));
};
const call = (expression: string) => callTurn([{ name: "calc", arguments: { expression } }]);

test("the environment path's prompt is the template's rendering of the AI SDK's request (no system message, its tool JSON)", () => {
  const q = calc.heldOut[0]!.question;
  const start = env.reset({ id: "q", question: q, golds: [] });
  assert.equal(tok.chat(start.system, start.user), promptText(q, [CALC_TOOL]));
  assert.equal(tok.chat(start.system, start.user), renderAgentChat([{ role: "user", content: q }], [CALC_TOOL]));
  assert.deepEqual(env.stops, [IM_END]);
});

test("a two-call episode has the tokens and mask of the same episode's demonstration; each observation is the template's tool-results turn", async () => {
  const q = calc.train.find((x) => x.category === "2 calls")!;
  const [a, b] = q.question.match(/\d+/g)!;
  const product = Number(a) * Number(b);
  const sold = q.question.match(/(\d+) \w+ are sold/)![1]!;
  const turns = [call(`${a} * ${b}`), call(`${product} - ${sold}`), answerTurn(q.golds[0]!)];
  const engine = new ScriptedEngine(tok, [IM_END], [turns]);
  const p = prompt(q.question);
  const [e] = await runEpisodes(engine, tok, env, [{ prompt: p, state: null, label: "q#0" }], { maxToolCalls: 4 });
  assert.equal(e!.finish, "answer");
  assert.deepEqual(e!.calls, [`${a} * ${b}`, `${product} - ${sold}`]);
  const demo = episodeDemo(tok, {
    question: q.question,
    tools: [CALC_TOOL],
    turns: [
      { calls: [{ name: "calc", arguments: { expression: `${a} * ${b}` } }], results: [String(product)] },
      { calls: [{ name: "calc", arguments: { expression: `${product} - ${sold}` } }], results: [String(product - Number(sold))] },
    ],
    answer: q.golds[0]!,
  });
  assert.deepEqual([...e!.tokens], demo.tokens);
  assert.deepEqual([...e!.mask], demo.mask);
  // What was inserted after the first call is the template's suffix, encoded alone.
  assert.deepEqual(engine.calls[1]!.appended![0], tok.encode(toolResponses([String(product)])));
  assert.equal(agentAnswer(e!.response), q.golds[0]);
  assert.equal(agentCalcReward(e!.response, q.golds), 1);
  assert.equal(calc.environment.exactMatch(e!.response, [String(product)]), 0);
});

test("a turn without a valid call is the answer: bad JSON, an unknown tool, arguments that break the schema, an unclosed tag", async () => {
  const bad = [
    '<tool_call>\n{"name": "calc", "arguments": {"expression": "1 + 1"}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "shell", "arguments": {"expression": "1 + 1"}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "calc", "arguments": {"expression": 2}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "calc", "arguments": {"expression": "1", "why": "x"}}\n</tool_call><|im_end|>',
    '<tool_call>\n{"name": "calc", "arguments": {"expression": "1 + 1"}}<|im_end|>',
    "42<|im_end|>",
  ];
  const engine = new ScriptedEngine(tok, [IM_END], bad.map((t) => [t]));
  const p = prompt(calc.heldOut[0]!.question);
  const eps = await runEpisodes(engine, tok, env, bad.map((_, i) => ({ prompt: p, state: null, label: `q#${i}` })));
  for (const e of eps) {
    assert.equal(e.finish, "answer");
    assert.deepEqual(e.calls, []);
  }
  assert.equal(engine.calls.filter((c) => c.op === "resume").length, 0, "nothing was inserted");
  assert.equal(agentCalcReward(eps[5]!.response, ["42"]), 1);
  assert.equal(agentCalcReward(eps[0]!.response, ["2"]), 0, "a call that did not parse is no answer");
  const reasons = bad.slice(0, 5).map((t) => parseToolCalls(t, [CALC_TOOL]).failure);
  assert.match(reasons[0]!, /bad JSON/);
  assert.match(reasons[1]!, /unknown tool 'shell'/);
  assert.match(reasons[2]!, /break its schema: \/expression must be string/);
  assert.match(reasons[3]!, /break its schema: .*additional properties/);
  assert.match(reasons[4]!, /never closed/);
});

test("two calls in a turn get both results in one turn; past the call limit the tool does not run", async () => {
  const two = callTurn([{ name: "calc", arguments: { expression: "2 * 3" } }, { name: "calc", arguments: { expression: "7 / 0" } }]);
  const engine = new ScriptedEngine(tok, [IM_END], [[two, call("1 + 1"), answerTurn("6")]]);
  const [e] = await runEpisodes(engine, tok, env, [{ prompt: prompt("q"), state: null, label: "q#0" }], { maxToolCalls: 1 });
  assert.deepEqual(engine.calls[1]!.appended![0], tok.encode(toolResponses(["6", "error: division by zero at 3"])));
  assert.deepEqual(engine.calls[2]!.appended![0], tok.encode(toolResponses([CALLS_EXHAUSTED])));
  assert.deepEqual(e!.calls, ["2 * 3; 7 / 0"]);
  const rendered = renderAgentChat(
    [
      { role: "user", content: "q" },
      { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "calc", arguments: { expression: "2 * 3" } } }, { type: "function", function: { name: "calc", arguments: { expression: "7 / 0" } } }] },
      { role: "tool", content: "6" },
      { role: "tool", content: "error: division by zero at 3" },
    ],
    [CALC_TOOL],
  );
  assert.ok(rendered.endsWith(`${two}${toolResponses(["6", "error: division by zero at 3"])}`));
});

test("the chain environment searches the chain task's passages; its reward normalises names", async () => {
  const chain = prepareAgentChain({ data: "synthetic", evalSize: 20 });
  const cenv = new AgentChainEnvironment();
  cenv.init();
  const q = chain.heldOut.find((x) => x.category === "1 hop")!;
  const name = q.question.replace(/\?$/, "").split(" ").at(-1)!;
  const step = cenv.step(null, { text: callTurn([{ name: "search", arguments: { query: name } }]), stop: IM_END, callsLeft: 4 });
  assert.ok("observation" in step);
  assert.equal(step.observation, toolResponses([chainSearch({ query: name })]));
  assert.match(step.observation, new RegExp(`${name} was born in ${q.golds[0]}\\.`));
  assert.equal(step.call, name);
  assert.equal(agentChainReward(`${q.golds[0]!.toUpperCase()}.`, q.golds), 1);
  assert.equal(agentChainReward("<|im_start|>assistant\nnobody<|im_end|>", q.golds), 0);
  assert.equal(chain.tokenizer.chat(cenv.reset(q).system, q.question), promptText(q.question, [SEARCH_TOOL]));
});

test("the tools run as agents call them; the reward reads a response's final turn or a bare answer", async () => {
  assert.equal(runCalc({ expression: "37 * 48" }), "1776");
  assert.equal(runCalc({ expression: "7 / 2" }), "error: 7 / 2 is not a whole number");
  assert.match(runCalc({} as { expression: string }), /^error: calc takes/);
  assert.equal(chainSearch({ query: "zzzz" }), "no results");
  const response = `${call("3 * 4")}${toolResponses(["12"])}12${IM_END}`;
  assert.equal(agentAnswer(response), "12");
  assert.equal(agentCalcReward(response, ["12"]), 1);
  assert.equal(agentCalcReward("12", ["12"]), 1, "a bare answer, as an agent returns it");
  assert.equal(agentCalcReward(" 0012 ", ["12"]), 1);
  assert.equal(agentCalcReward("12 apples", ["12"]), 0);
  assert.equal(agentCalcReward(call("3 * 4"), ["12"]), 0, "a call is no answer");
  assert.equal(agentAnswer(`${call("3 * 4")}${toolResponses(["12"])}`), null, "an episode cut after a call has none");
  for (const [spec, pkg] of [[AGENT_CALC_ENVIRONMENT, agentCalculator], [AGENT_CHAIN_ENVIRONMENT, agentChain]] as const) {
    const loaded = await loadEnvironment(spec, (m) => import(m));
    assert.deepEqual(loaded.stops, [IM_END]);
    assert.throws(() => pkg.recipeFor("/some/qwen", "synthetic"), /trains the tiny preset/);
  }
});
