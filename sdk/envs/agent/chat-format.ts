/**
 * The chat format the agent tasks' policies speak: Qwen2.5-Instruct's chat
 * template (sdk/rl/text/qwen-template.ts) with tools. A conversation is
 *
 *   <|im_start|>system\n{system or Qwen's default line}{TOOLS_HEAD}\n{tool json}…{TOOLS_TAIL}
 *   <|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n
 *   <tool_call>\n{"name": "calc", "arguments": {"expression": "37 * 48"}}\n</tool_call><|im_end|>   ← sampled
 *   \n<|im_start|>user\n<tool_response>\n1776\n</tool_response><|im_end|>\n<|im_start|>assistant\n  ← the tool's turn
 *   1776<|im_end|>                                                                                     ← sampled
 *
 * Everything here is what that template writes, as literal strings (the
 * tests render the template and compare), so the environment path, the
 * warm start's demonstrations and the agent endpoint put the same text
 * between the same boundaries. A tool call's arguments are written the way
 * the template's `tojson` writes them (Python's json.dumps separators): a
 * policy that writes them so makes the next request's rendering extend the
 * session's tokens.
 */
import { QWEN25_CHAT_TEMPLATE } from "../../rl/text/qwen-template.js";
import { renderChat, type TemplateMessage, type ToolSpec } from "../../rl/text/chat-messages.js";

/** The chat template the agent policies ship with (Qwen2.5-Instruct's). */
export const AGENT_CHAT_TEMPLATE = QWEN25_CHAT_TEMPLATE;

/** The special tokens the template reads. */
export const AGENT_SPECIAL = { bos_token: "", eos_token: "<|im_end|>" } as const;

export const IM_START = "<|im_start|>";
export const IM_END = "<|im_end|>";
export const END_OF_TEXT = "<|endoftext|>";

/** The system line the template writes when the messages have no system message. */
export const QWEN_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

/** What the template writes after the system text when there are tools, before the first tool's JSON. */
export const TOOLS_HEAD = "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";

/** What it writes after the last tool's JSON: the call format, and the end of the system turn. */
export const TOOLS_TAIL = '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

/** Opens the tool results' turn (right after the sampled `<|im_end|>` of a call), and one result. */
export const RESPONSE_OPEN = "\n<|im_start|>user\n<tool_response>\n";
/** Between two results of one turn. */
export const RESPONSE_BETWEEN = "\n</tool_response>\n<tool_response>\n";
/** Closes the tool results' turn and opens the assistant's next one. */
export const RESPONSE_CLOSE = "\n</tool_response><|im_end|>\n<|im_start|>assistant\n";

/** The end of a prompt: the user's turn closed, the assistant's opened. */
export const GENERATION_PROMPT = "<|im_end|>\n<|im_start|>assistant\n";

/** Opens a tool call, up to its name; between the name and the arguments; after the arguments. */
export const CALL_OPEN = '<tool_call>\n{"name": "';
export const CALL_ARGUMENTS = '", "arguments": ';
export const CALL_CLOSE = "}\n</tool_call>";

/** A value as JSON the way the template's `tojson` writes it: Python's json.dumps separators (", ", ": "), non-ASCII kept. */
export function templateJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(templateJson).join(", ")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${JSON.stringify(k)}: ${templateJson(v)}`)
      .join(", ")}}`;
  }
  return JSON.stringify(value) ?? "null";
}

/** One tool call as the template renders it in an assistant turn (and as a policy must write it). */
export function toolCallText(name: string, args: Record<string, unknown>): string {
  return `${CALL_OPEN}${name}${CALL_ARGUMENTS}${templateJson(args)}${CALL_CLOSE}`;
}

/** What a policy samples for a turn that calls tools: the calls, one per line, then the end of its turn. */
export function callTurn(calls: ReadonlyArray<{ name: string; arguments: Record<string, unknown> }>): string {
  return `${calls.map((c) => toolCallText(c.name, c.arguments)).join("\n")}${IM_END}`;
}

/** What a policy samples for its final answer. */
export function answerTurn(answer: string): string {
  return `${answer}${IM_END}`;
}

/** The tool results' turn after a turn of calls: what the template renders for the tool messages, up to the assistant's next turn. */
export function toolResponses(results: readonly string[]): string {
  return `${RESPONSE_OPEN}${results.join(RESPONSE_BETWEEN)}${RESPONSE_CLOSE}`;
}

/**
 * The system turn's text for `tools` (between `<|im_start|>system\n` and
 * `<|im_end|>`), as the template writes it: the system message's text (or
 * Qwen's default line), the tools block and the call format. Given as the
 * system message of a template rendering without tools, it renders the
 * same prompt as the messages with tools do (the environment path uses this).
 */
export function systemWithTools(tools: readonly ToolSpec[], system?: string): string {
  const json = tools.map((t) => `\n${templateJson(t)}`).join("");
  return `${system ?? QWEN_DEFAULT_SYSTEM}${TOOLS_HEAD}${json}${TOOLS_TAIL.slice(0, -`${IM_END}\n`.length)}`;
}

/** Renders messages and tools with the agent template (the endpoint's rendering, in-process). */
export function renderAgentChat(messages: readonly TemplateMessage[], tools: readonly ToolSpec[], addGenerationPrompt = true): string {
  return renderChat(AGENT_CHAT_TEMPLATE, AGENT_SPECIAL, { messages, tools, addGenerationPrompt });
}

/**
 * The text of the final assistant turn of `text`: after its last
 * `<|im_start|>assistant\n`, up to its `<|im_end|>` (the whole of `text`
 * when it has neither: a bare answer as an agent returns it, or an
 * environment-path response whose only turn is the answer).
 */
export function finalTurn(text: string): string {
  const open = `${IM_START}assistant\n`;
  const i = text.lastIndexOf(open);
  const turn = i < 0 ? text : text.slice(i + open.length);
  const end = turn.indexOf(IM_END);
  return end < 0 ? turn : turn.slice(0, end);
}
