/**
 * Tool calls parsed back from the model's output, in the format of its chat
 * template's family, and checked against the request's tools. A parser per
 * family (`hermes`: Qwen2.5/Qwen3/Hermes `<tool_call>{"name", "arguments"}
 * </tool_call>`; `llama3-json`: Llama 3.1's bare `{"name", "parameters"}`),
 * chosen from the template or named by the run, and more can be registered
 * (`registerToolParser`). Output that looks like a call but does not parse
 * (bad JSON, an unknown tool, arguments that break the tool's JSON schema,
 * an unclosed tag) is returned as content and reported as a failure with
 * its reason: the caller counts it, nothing is dropped silently.
 */
import AjvModule, { type ValidateFunction } from "ajv";
import Ajv2020Module from "ajv/dist/2020.js";
import type { ToolSpec } from "../text/chat-messages.js";
import { badRequest } from "./endpoint-error.js";

/** One call parsed from the output. */
export interface ParsedCall {
  name: string;
  arguments: Record<string, unknown>;
}

/** A parse failure: why, and the text it was about. */
export interface ParseFailure {
  reason: string;
  text: string;
}

/** What a parser makes of a completion's text. */
export interface ParsedReply {
  /** The text before the calls (everything, when there are none or one failed); null when empty and there are calls. */
  content: string | null;
  calls: ParsedCall[];
  failures: ParseFailure[];
}

/** A template family's tool-call format. */
export interface ToolCallParser {
  readonly name: string;
  /** Does this chat template write calls this parser reads? */
  matches(template: string): boolean;
  /** Text the reply is made to start with for tool_choice "required" (name undefined) or a named function: part of the prompt, never trained. */
  forcedPrefix(name: string | undefined): string;
  /** Splits a reply into content and calls (no check against the tools: `checkCalls` does that). */
  parse(text: string): ParsedReply;
  /** How much of a reply still being written is content for sure (no call can start inside it): what a stream may send now. */
  contentSoFar(text: string): number;
}

/** The longest suffix of `text` that is a prefix of `marker` (a marker that may be about to start). */
export function partialSuffix(text: string, marker: string): number {
  for (let n = Math.min(marker.length, text.length); n > 0; n--) if (marker.startsWith(text.slice(text.length - n))) return n;
  return 0;
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** `{"name": …, "arguments"|"parameters": {…}}` from JSON text, or the reason it is not one. */
function callFrom(json: string, argsKey: "arguments" | "parameters"): ParsedCall | string {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch (err) {
    return `bad JSON: ${(err as Error).message}`;
  }
  if (!isObj(v) || typeof v.name !== "string") return 'expected {"name": …, "arguments": {…}}';
  let args = v[argsKey] ?? v.arguments ?? {};
  if (typeof args === "string") {
    try {
      args = JSON.parse(args);
    } catch {
      return `the arguments of ${v.name} are a string that is not JSON`;
    }
  }
  if (!isObj(args)) return `the arguments of ${v.name} are not a JSON object`;
  return { name: v.name, arguments: args };
}

/** Qwen2.5, Qwen3 and Hermes: `<tool_call>\n{json}\n</tool_call>` blocks after optional content. */
export const hermesParser: ToolCallParser = {
  name: "hermes",
  matches: (t) => t.includes("<tool_call>"),
  forcedPrefix: (name) => (name === undefined ? '<tool_call>\n{"name": "' : `<tool_call>\n{"name": "${name}", "arguments": `),
  parse(text) {
    const first = text.indexOf("<tool_call>");
    if (first < 0) return { content: text, calls: [], failures: [] };
    const calls: ParsedCall[] = [];
    const failures: ParseFailure[] = [];
    const block = /<tool_call>([\s\S]*?)<\/tool_call>/g;
    let end = first;
    for (let m = block.exec(text); m; m = block.exec(text)) {
      const c = callFrom(m[1]!.trim(), "arguments");
      if (typeof c === "string") failures.push({ reason: c, text: m[0] });
      else calls.push(c);
      end = m.index + m[0].length;
    }
    const rest = text.slice(end);
    if (rest.includes("<tool_call>")) failures.push({ reason: "a <tool_call> is never closed with </tool_call>", text: rest.slice(rest.indexOf("<tool_call>")) });
    if (failures.length > 0) return { content: text, calls: [], failures };
    // The template writes "\n" before each <tool_call> after content: the content is what comes before it.
    const content = text.slice(0, first).replace(/\n$/, "");
    return { content: content === "" ? null : content, calls, failures };
  },
  contentSoFar(text) {
    // Content ends where a call starts, less the newline the template writes before it.
    const at = text.indexOf("<tool_call>");
    if (at >= 0) return text[at - 1] === "\n" ? at - 1 : at;
    return text.length - partialSuffix(text, "\n<tool_call>");
  },
};

/** Llama 3.1/3.2's JSON tool calls: the reply is one `{"name": …, "parameters": {…}}` object (optionally after `<|python_tag|>`). */
export const llama3JsonParser: ToolCallParser = {
  name: "llama3-json",
  matches: (t) => t.includes("<|python_tag|>") || (t.includes('"parameters"') && t.includes("<|eom_id|>")),
  forcedPrefix: (name) => (name === undefined ? '{"name": "' : `{"name": "${name}", "parameters": `),
  parse(text) {
    const body = text.replace(/^<\|python_tag\|>/, "").trim();
    if (!body.startsWith("{") || !body.includes('"name"')) return { content: text, calls: [], failures: [] };
    const c = callFrom(body, "parameters");
    if (typeof c === "string") return { content: text, calls: [], failures: [{ reason: c, text }] };
    return { content: null, calls: [c], failures: [] };
  },
  contentSoFar(text) {
    // A reply that is (or may become) one JSON call is not streamed as content.
    const t = text.trimStart();
    return t === "" || t.startsWith("{") || t.startsWith("<|python_tag|>") || "<|python_tag|>".startsWith(t) ? 0 : text.length;
  },
};

const PARSERS = new Map<string, ToolCallParser>([
  [hermesParser.name, hermesParser],
  [llama3JsonParser.name, llama3JsonParser],
]);

/** Makes a parser available by name (`--tool-parser NAME`) and to template detection (tried after the built-in ones). */
export function registerToolParser(p: ToolCallParser): void {
  if (!p || typeof p.name !== "string" || typeof p.parse !== "function" || typeof p.matches !== "function" || typeof p.forcedPrefix !== "function" || typeof p.contentSoFar !== "function") {
    throw new TypeError("registerToolParser needs { name, matches(template), forcedPrefix(name?), parse(text), contentSoFar(text) }");
  }
  PARSERS.set(p.name, p);
}

/** The parser named `name`, or (name "auto"/undefined) the first whose family writes the template; undefined when none does. */
export function toolParserFor(template: string | undefined, name?: string): ToolCallParser | undefined {
  if (name !== undefined && name !== "auto") {
    const p = PARSERS.get(name);
    if (!p) throw new RangeError(`unknown tool-call parser '${name}': use one of ${[...PARSERS.keys()].join(", ")}, or register one`);
    return p;
  }
  if (template === undefined) return undefined;
  for (const p of PARSERS.values()) if (p.matches(template)) return p;
  return undefined;
}

type AjvCtor = new (opts: Record<string, unknown>) => { compile(schema: unknown): ValidateFunction };
const Ajv = ((AjvModule as unknown as { default?: AjvCtor }).default ?? AjvModule) as unknown as AjvCtor;
const Ajv2020 = ((Ajv2020Module as unknown as { default?: AjvCtor }).default ?? Ajv2020Module) as unknown as AjvCtor;
const draft7 = new Ajv({ strict: false, allErrors: false });
const draft2020 = new Ajv2020({ strict: false, allErrors: false });
const validators = new Map<string, ValidateFunction>();
const MAX_VALIDATORS = 256;

/** The compiled validator of a tool's parameters (a 400 naming the tool when its schema does not compile). */
export function validatorOf(tool: ToolSpec, index: number): ValidateFunction | undefined {
  const schema = tool.function.parameters;
  if (schema === undefined) return undefined;
  const key = JSON.stringify(schema);
  let v = validators.get(key);
  if (!v) {
    try {
      v = (String(schema.$schema ?? "").includes("2020-12") ? draft2020 : draft7).compile(schema);
    } catch (err) {
      throw badRequest(`tools[${index}].function.parameters`, `not a JSON schema hearth can check arguments against: ${(err as Error).message}`);
    }
    if (validators.size >= MAX_VALIDATORS) validators.delete(validators.keys().next().value as string);
    validators.set(key, v);
  }
  return v;
}

/** Checks parsed calls against the request's tools: an unknown tool or arguments breaking its schema fail the reply (returned as content). */
export function checkCalls(reply: ParsedReply, text: string, tools: readonly ToolSpec[]): ParsedReply {
  if (reply.calls.length === 0) return reply;
  const failures: ParseFailure[] = [];
  for (const c of reply.calls) {
    const i = tools.findIndex((t) => t.function.name === c.name);
    if (i < 0) {
      failures.push({ reason: `unknown tool '${c.name}' (the request declares ${tools.map((t) => t.function.name).join(", ") || "none"})`, text: JSON.stringify(c) });
      continue;
    }
    const v = validatorOf(tools[i]!, i);
    if (v && !v(c.arguments)) {
      const e = v.errors?.[0];
      failures.push({ reason: `the arguments of ${c.name} break its schema: ${e ? `${e.instancePath || "(root)"} ${e.message}` : "invalid"}`, text: JSON.stringify(c.arguments) });
    }
  }
  return failures.length === 0 ? reply : { content: text, calls: [], failures };
}
