/**
 * The endpoint's request checks and tool-call parsing, without a server:
 * every bad field is a 400 naming it; messages become what a template reads
 * (a tool call's arguments an object, text parts joined); Hermes/Qwen calls
 * parse back with their content, and output that looks like a call but does
 * not parse (bad JSON, an unknown tool, arguments that break the schema, an
 * unclosed tag) comes back whole as content with a failure saying why.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseChatRequest } from "../../sdk/rl/agent/chat-request.js";
import { EndpointError } from "../../sdk/rl/agent/endpoint-error.js";
import { checkCalls, hermesParser, llama3JsonParser, toolParserFor } from "../../sdk/rl/agent/tool-parsers.js";
import { QWEN25_CHAT_TEMPLATE } from "../../sdk/rl/text/qwen-template.js";
import type { ToolSpec } from "../../sdk/rl/text/chat-messages.js";

const CALC: ToolSpec = { type: "function", function: { name: "calc", description: "Evaluate.", parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"], additionalProperties: false } } };
const ok = { model: "m", messages: [{ role: "user", content: "hi" }] };

function refused(body: unknown): EndpointError {
  try {
    parseChatRequest(body);
  } catch (err) {
    assert.ok(err instanceof EndpointError, `an EndpointError, got ${String(err)}`);
    return err;
  }
  assert.fail(`accepted ${JSON.stringify(body)}`);
}

test("each bad field is a 400 that names it", () => {
  const cases: Array<[unknown, string]> = [
    [{ messages: ok.messages }, "model"],
    [{ model: "m", messages: [] }, "messages"],
    [{ model: "m", messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
    [{ model: "m", messages: [{ role: "user", content: [{ type: "image_url", image_url: {} }] }] }, "messages[0].content[0]"],
    [{ model: "m", messages: [{ role: "tool", content: "x" }] }, "messages[0].tool_call_id"],
    [{ model: "m", messages: [{ role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "calc", arguments: "{oops" } }] }] }, "messages[0].tool_calls[0].function.arguments"],
    [{ ...ok, temperature: 3 }, "temperature"],
    [{ ...ok, top_p: -1 }, "top_p"],
    [{ ...ok, max_tokens: 0 }, "max_tokens"],
    [{ ...ok, max_completion_tokens: 1.5 }, "max_completion_tokens"],
    [{ ...ok, n: 99 }, "n"],
    [{ ...ok, stop: ["a", "b", "c", "d", "e"] }, "stop"],
    [{ ...ok, top_logprobs: 3 }, "top_logprobs"],
    [{ ...ok, tools: [{ type: "function", function: { name: "has space" } }] }, "tools[0].function.name"],
    [{ ...ok, tools: [CALC, CALC] }, "tools"],
    [{ ...ok, tools: [CALC], tool_choice: { type: "function", function: { name: "search" } } }, "tool_choice"],
    [{ ...ok, tool_choice: "required" }, "tool_choice"],
    [{ ...ok, response_format: { type: "json_schema" } }, "response_format"],
    [{ ...ok, frequency_penalty: 0.5 }, "frequency_penalty"],
  ];
  for (const [body, param] of cases) {
    const e = refused(body);
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.equal(e.param, param, `${JSON.stringify(body)}: ${e.message}`);
    assert.equal(e.body().error.param, param);
    assert.equal(e.body().error.type, "invalid_request_error");
  }
});

test("messages are normalised for the template; neutral extras are accepted", () => {
  const r = parseChatRequest({
    model: "m",
    messages: [
      { role: "developer", content: "be brief" },
      { role: "user", content: [{ type: "text", text: "4 * " }, { type: "text", text: "12?" }] },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "calc", arguments: '{"expression": "4 * 12"}' } }] },
      { role: "tool", tool_call_id: "c1", content: "48" },
    ],
    tools: [CALC],
    max_tokens: 20,
    max_completion_tokens: 10,
    stream: true,
    stream_options: { include_usage: true },
    user: "u",
    store: false,
    parallel_tool_calls: true,
    frequency_penalty: 0,
  });
  assert.deepEqual(r.messages[0], { role: "system", content: "be brief" });
  assert.equal(r.messages[1]!.content, "4 * 12?");
  assert.deepEqual(r.messages[2], { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "calc", arguments: { expression: "4 * 12" } } }] });
  assert.equal(r.toolChoice, "auto");
  assert.equal(r.maxTokens, 10, "max_completion_tokens wins");
  assert.ok(r.stream && r.includeUsage);
});

test("hermes: calls parse with their content; what does not parse is content, with why", () => {
  const call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "4 * 12"}}\n</tool_call>';
  const good = checkCalls(hermesParser.parse(call), call, [CALC]);
  assert.deepEqual(good, { content: null, calls: [{ name: "calc", arguments: { expression: "4 * 12" } }], failures: [] });
  const withText = `Let me compute.\n${call}`;
  assert.equal(hermesParser.parse(withText).content, "Let me compute.", "the template's newline before <tool_call> is not content");
  const two = checkCalls(hermesParser.parse(`${call}\n${call.replace("4 * 12", "48 - 1")}`), "", [CALC]);
  assert.equal(two.calls.length, 2);
  const bad: Array<[string, RegExp]> = [
    ['<tool_call>\n{"name": "calc", "arguments": {"expression": 4 * 12}}\n</tool_call>', /bad JSON/],
    ['<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>', /unknown tool 'search'/],
    ['<tool_call>\n{"name": "calc", "arguments": {"expr": "1"}}\n</tool_call>', /break its schema/],
    ['<tool_call>\n{"name": "calc", "arguments": {"expression": 12}}\n</tool_call>', /break its schema: \/expression must be string/],
    ['<tool_call>\n{"name": "calc", "arguments": {"expression": "1"', /never closed/],
    ['<tool_call>["calc"]</tool_call>', /expected \{"name"/],
  ];
  for (const [text, why] of bad) {
    const r = checkCalls(hermesParser.parse(text), text, [CALC]);
    assert.deepEqual(r.calls, [], text);
    assert.equal(r.content, text, "returned whole, as content");
    assert.equal(r.failures.length, 1, text);
    assert.match(r.failures[0]!.reason, why);
  }
  assert.deepEqual(hermesParser.parse("48"), { content: "48", calls: [], failures: [] }, "plain text is no failure");
});

test("parsers by template family, llama3-json, and a forced start", () => {
  assert.equal(toolParserFor(QWEN25_CHAT_TEMPLATE)?.name, "hermes");
  assert.equal(toolParserFor("{{ messages }}"), undefined);
  assert.equal(toolParserFor(QWEN25_CHAT_TEMPLATE, "llama3-json")?.name, "llama3-json");
  assert.throws(() => toolParserFor(undefined, "nope"), /unknown tool-call parser 'nope'/);
  const l = llama3JsonParser.parse('<|python_tag|>{"name": "calc", "parameters": {"expression": "1 + 1"}}');
  assert.deepEqual(l.calls, [{ name: "calc", arguments: { expression: "1 + 1" } }]);
  assert.equal(hermesParser.forcedPrefix("calc"), '<tool_call>\n{"name": "calc", "arguments": ');
  const forced = hermesParser.forcedPrefix("calc") + '{"expression": "2 * 3"}}\n</tool_call>';
  assert.deepEqual(checkCalls(hermesParser.parse(forced), forced, [CALC]).calls, [{ name: "calc", arguments: { expression: "2 * 3" } }]);
});
