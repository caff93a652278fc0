/**
 * Tool calls read back from a turn the policy wrote, in the Hermes/Qwen
 * format its chat template asks for (`<tool_call>\n{"name": …, "arguments":
 * {…}}\n</tool_call>`), and checked against the declared tools: an unknown
 * tool, JSON that does not parse, arguments that break the tool's JSON
 * schema (checked with ajv, as the agent endpoint checks them) or a
 * `<tool_call>` never closed make the turn content, with the reason. The
 * environment path (environment.ts) ends an episode on such a turn, as an
 * agent does when the endpoint answers it with content and no `tool_calls`.
 */
import AjvModule, { type ValidateFunction } from "ajv";
import type { ToolSpec } from "../../rl/text/chat-messages.js";
import { IM_END } from "./chat-format.js";

/** One call read from a turn. */
export interface ToolCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** What a turn holds: its calls (none: it is the answer), or why what looked like a call is not one. */
export interface ParsedTurn {
  /** The text before the first call (the whole turn when it has no valid calls), without the end of turn. */
  content: string;
  calls: ToolCall[];
  /** Set when the turn wrote `<tool_call>` but it is not a valid call; the turn then counts as content. */
  failure?: string;
}

type AjvCtor = new (opts: Record<string, unknown>) => { compile(schema: unknown): ValidateFunction };
const Ajv = ((AjvModule as unknown as { default?: AjvCtor }).default ?? AjvModule) as unknown as AjvCtor;
const ajv = new Ajv({ strict: false, allErrors: false });
const validators = new Map<string, ValidateFunction>();

/** The compiled validator of a tool's parameters (cached by the schema's JSON). */
function validatorOf(tool: ToolSpec): ValidateFunction | undefined {
  const schema = tool.function.parameters;
  if (schema === undefined) return undefined;
  const key = JSON.stringify(schema);
  let v = validators.get(key);
  if (!v) {
    v = ajv.compile(schema);
    validators.set(key, v);
  }
  return v;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** One call's JSON, checked against `tools`, or why it is not a valid call. */
function callOf(json: string, tools: readonly ToolSpec[]): ToolCall | string {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch (err) {
    return `bad JSON: ${(err as Error).message}`;
  }
  if (!isObject(v) || typeof v.name !== "string" || !isObject(v.arguments ?? {})) return 'expected {"name": …, "arguments": {…}}';
  const name = v.name;
  const tool = tools.find((t) => t.function.name === name);
  if (!tool) return `unknown tool '${name}' (declared: ${tools.map((t) => t.function.name).join(", ") || "none"})`;
  const args = (v.arguments ?? {}) as Record<string, unknown>;
  const check = validatorOf(tool);
  if (check && !check(args)) {
    const e = check.errors?.[0];
    return `the arguments of ${name} break its schema: ${e ? `${e.instancePath || "(root)"} ${e.message}` : "invalid"}`;
  }
  return { name, arguments: args };
}

/** Reads the calls of a turn (its text as decoded, with or without the `<|im_end|>` it stopped at). */
export function parseToolCalls(turn: string, tools: readonly ToolSpec[]): ParsedTurn {
  const end = turn.lastIndexOf(IM_END);
  const text = end >= 0 && end + IM_END.length === turn.length ? turn.slice(0, end) : turn;
  const first = text.indexOf("<tool_call>");
  if (first < 0) return { content: text, calls: [] };
  const calls: ToolCall[] = [];
  const block = /<tool_call>([\s\S]*?)<\/tool_call>/g;
  let last = first;
  for (let m = block.exec(text); m; m = block.exec(text)) {
    const c = callOf(m[1]!.trim(), tools);
    if (typeof c === "string") return { content: text, calls: [], failure: c };
    calls.push(c);
    last = m.index + m[0].length;
  }
  if (text.slice(last).includes("<tool_call>")) return { content: text, calls: [], failure: "a <tool_call> is never closed with </tool_call>" };
  // The template writes "\n" between content and the first call.
  return { content: text.slice(0, first).replace(/\n$/, ""), calls };
}
