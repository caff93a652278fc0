/**
 * Agents written with the Vercel AI SDK (`ai` + `@ai-sdk/openai-compatible`)
 * and the official `openai` SDK against real rollout executors serving the
 * calculator agent task's tiny policy (it writes Qwen2.5 `<tool_call>` JSON):
 * `generateText` with a tool over several steps (the call parsed, the tool
 * run by the SDK, its result sent back, the answer), `streamText` (tool-call
 * and text events), the openai SDK's streamed tool-call deltas adding up to
 * the plain reply's call; then the agent trained unchanged: `hearth train
 * agent`'s path with the AI SDK agent run in the executors, held-out exact
 * match and tool calls per problem up.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, streamText, tool } from "ai";
import OpenAI from "openai";
import { z } from "zod";
import { agentCalculator } from "../../sdk/envs/agent/package.js";
import { CALC_DESCRIPTION, CALC_TOOL, runCalc } from "../../sdk/envs/agent/tools.js";
import { ALARM_THRESHOLDS } from "../../sdk/rl/run/alarms.js";
import { AgentRun } from "../../sdk/rl/run/run.js";
import { DIST, startCluster, type TestCluster } from "../helpers/cluster.js";

const work = mkdtempSync(path.join(os.tmpdir(), "hearth-agent-sdks-"));
let cluster: TestCluster;
let run: AgentRun;

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
  run = await AgentRun.create({ head: cluster.endpoint, name: "agent-sdks", out: path.join(work, "out"), evalEvery: 0, evalSize: 40, seed: 1, checkpoint: false, log: () => undefined }, agentCalculator);
});

after(async () => {
  await run?.close().catch(() => undefined);
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

const calc = tool({ description: CALC_DESCRIPTION, inputSchema: z.object({ expression: z.string() }), execute: async ({ expression }) => runCalc({ expression }) });

test("the Vercel AI SDK: generateText calls the tool over several steps and answers; streamText streams the call, its result and the answer", async () => {
  const llm = createOpenAICompatible({ name: "hearth", baseURL: await run.endpoint.baseURL(), apiKey: run.endpoint.apiKey });
  let multi = 0;
  const oneCall: string[] = [];
  let right = 0;
  // The first six held-out problems (one, two and three calls), and the next three that need one call.
  const items = [...run.task.heldOut.slice(0, 6), ...run.task.heldOut.slice(6).filter((q) => q.category === "1 call").slice(0, 3)];
  for (const [i, item] of items.entries()) {
    const r = await generateText({ model: llm(run.endpoint.model), tools: { calc }, prompt: item.question, stopWhen: stepCountIs(6), temperature: 0, maxRetries: 0 });
    const calls = r.steps.flatMap((s) => s.toolCalls);
    if (i < 6 && r.steps.length >= 2 && calls.length >= 1) multi++;
    for (const c of calls) assert.equal(c.toolName, "calc");
    for (const c of calls) assert.equal(typeof (c.input as { expression: unknown }).expression, "string", "the arguments parsed and checked against the schema");
    if (item.category === "1 call") {
      const ok = item.golds.includes(r.text.trim());
      if (ok) right++;
      oneCall.push(`${r.text.trim()}${ok ? "" : ` (gold ${item.golds[0]})`}`);
    }
  }
  assert.ok(multi >= 4, `a tool call then an answer, over several steps (${multi} of 6)`);
  assert.ok(oneCall.length >= 3 && right >= oneCall.length - 1, `one-call problems answered right through the SDK's steps: ${oneCall.join(", ")}`);

  const s = streamText({ model: llm(run.endpoint.model), tools: { calc }, prompt: run.task.heldOut[0]!.question, stopWhen: stepCountIs(6), temperature: 0, maxRetries: 0 });
  const kinds: string[] = [];
  let text = "";
  for await (const part of s.fullStream) {
    kinds.push(part.type);
    if (part.type === "text-delta") text += part.text;
  }
  assert.ok(kinds.includes("tool-call") && kinds.includes("tool-result"), `the stream has the call and its result: ${[...new Set(kinds)].join(", ")}`);
  assert.ok(kinds.includes("text-delta") && text.trim() !== "", "and the answer's text");
  assert.equal(text, await s.text);
});

test("the openai SDK: a streamed tool call's deltas add up to the plain reply's call", async () => {
  const client = new OpenAI({ baseURL: await run.endpoint.baseURL(), apiKey: run.endpoint.apiKey, maxRetries: 0 });
  const messages = [{ role: "user" as const, content: run.task.heldOut[1]!.question }];
  const plain = await client.chat.completions.create({ model: run.endpoint.model, messages, tools: [CALC_TOOL as OpenAI.Chat.ChatCompletionTool], seed: 3 });
  assert.equal(plain.choices[0]!.finish_reason, "tool_calls");
  const call = plain.choices[0]!.message.tool_calls![0]!;
  assert.ok(call.type === "function");
  const stream = await client.chat.completions.create({ model: run.endpoint.model, messages, tools: [CALC_TOOL as OpenAI.Chat.ChatCompletionTool], seed: 3, stream: true });
  let name = "";
  let args = "";
  let finish: string | null = null;
  let content = "";
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta;
    for (const t of d?.tool_calls ?? []) {
      name += t.function?.name ?? "";
      args += t.function?.arguments ?? "";
    }
    content += d?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(name, call.function.name);
  assert.equal(args, call.function.arguments);
  assert.equal(finish, "tool_calls");
  assert.equal(content, "", "nothing of the call leaked out as content");
});

test("the AI SDK agent trains unchanged in the executors: held-out EM and tool calls per problem go up", { timeout: 900_000 }, async () => {
  run.opts.agent = `${path.join(DIST, "examples/agents/calc-ai-sdk.js")}#solve`;
  const before = await run.evaluate();
  await run.train(10, { progress: false });
  const after = await run.evaluate();
  const sum = (k: "agent_sessions" | "agent_tool_calls" | "tool_parse_failures") => run.history.reduce((a, x) => a + (x[k] ?? 0), 0);
  const unparsed = sum("tool_parse_failures") / Math.max(1, sum("tool_parse_failures") + sum("agent_tool_calls"));
  assert.ok(sum("agent_sessions") > 0 && sum("agent_tool_calls") > 0, "the agent's sessions made tool calls");
  // Sampling at temperature 1 can write a call that does not parse (counted, returned as content): a few, never most.
  assert.ok(unparsed <= ALARM_THRESHOLDS.parseFailures, `the agent's calls parse: ${sum("tool_parse_failures")} unparsed of ${sum("tool_parse_failures") + sum("agent_tool_calls")} attempts`);
  assert.ok(after.em >= before.em + 0.15, `held-out EM ${before.em} → ${after.em}`);
  assert.ok(after.callsPerSample >= before.callsPerSample * 1.2, `calls per problem ${before.callsPerSample} → ${after.callsPerSample}`);
  assert.ok(run.history.every((x) => (x.logprob_gap ?? 0) < 0.01), "the sampler's and the trainer's logprobs agree on the agent path, every step");
});
