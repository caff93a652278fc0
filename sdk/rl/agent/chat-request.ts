/**
 * A Chat Completions request, checked and normalised: every field the
 * endpoint honours is validated (a 400 names the field and says what it
 * takes), fields that would change the output but cannot be honoured
 * (`response_format` other than text, penalties, `logit_bias`) are refused
 * rather than silently dropped, and fields that do not change the output
 * (`user`, `metadata`, `store`, `parallel_tool_calls`…) are accepted and
 * ignored. Messages become what a chat template reads (chat-messages.ts):
 * text parts joined, `developer` as `system`, a tool call's `arguments`
 * string parsed into an object, an assistant's null content as "".
 */
import type { TemplateMessage, TemplateToolCall, ToolSpec } from "../text/chat-messages.js";
import { badRequest } from "./endpoint-error.js";

/** How the model may use tools: OpenAI's `tool_choice`. */
export type ToolChoice = "auto" | "none" | "required" | { name: string };

/** A checked request. */
export interface ChatRequest {
  model: string;
  messages: TemplateMessage[];
  tools: ToolSpec[];
  toolChoice: ToolChoice;
  temperature?: number;
  topP?: number;
  /** `max_completion_tokens`, else `max_tokens`. */
  maxTokens?: number;
  stop: string[];
  seed?: number;
  n: number;
  logprobs: boolean;
  topLogprobs: number;
  stream: boolean;
  includeUsage: boolean;
}

/** Most choices one request may ask for. */
export const MAX_CHOICES = 16;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A message's text: a string, or an array of text parts (joined); null/absent where `nullable`. */
function textOf(v: unknown, param: string, nullable: boolean): string {
  if (typeof v === "string") return v;
  if ((v === null || v === undefined) && nullable) return "";
  if (Array.isArray(v)) {
    return v
      .map((part, k) => {
        if (!isObj(part) || part.type !== "text" || typeof part.text !== "string") {
          throw badRequest(`${param}[${k}]`, `only text parts ({ "type": "text", "text": "…" }) are supported; got ${JSON.stringify(part).slice(0, 80)}`);
        }
        return part.text;
      })
      .join("");
  }
  throw badRequest(param, `expected a string or an array of text parts; got ${v === null ? "null" : typeof v}`);
}

function toolCalls(v: unknown, param: string): TemplateToolCall[] {
  if (!Array.isArray(v)) throw badRequest(param, "expected an array of tool calls");
  return v.map((c, j) => {
    const p = `${param}[${j}]`;
    if (!isObj(c) || !isObj(c.function)) throw badRequest(p, 'expected { "id", "type": "function", "function": { "name", "arguments" } }');
    const f = c.function;
    if (typeof f.name !== "string" || f.name === "") throw badRequest(`${p}.function.name`, "expected the function's name");
    let args: unknown = f.arguments ?? "{}";
    if (typeof args === "string") {
      try {
        args = JSON.parse(args === "" ? "{}" : args);
      } catch (err) {
        throw badRequest(`${p}.function.arguments`, `not valid JSON (${(err as Error).message}); send the arguments the model produced, as a JSON string`);
      }
    }
    if (!isObj(args)) throw badRequest(`${p}.function.arguments`, "expected a JSON object");
    return { ...(typeof c.id === "string" ? { id: c.id } : {}), type: "function", function: { name: f.name, arguments: args } };
  });
}

function message(v: unknown, i: number): TemplateMessage {
  const p = `messages[${i}]`;
  if (!isObj(v)) throw badRequest(p, "expected a message object with a role");
  const role = v.role === "developer" ? "system" : v.role;
  switch (role) {
    case "system":
    case "user":
      return { role, content: textOf(v.content, `${p}.content`, false) };
    case "assistant": {
      const m: TemplateMessage = { role, content: textOf(v.content, `${p}.content`, true) };
      if (v.tool_calls !== undefined && v.tool_calls !== null) {
        const calls = toolCalls(v.tool_calls, `${p}.tool_calls`);
        if (calls.length > 0) m.tool_calls = calls;
      }
      if (typeof v.reasoning_content === "string") m.reasoning_content = v.reasoning_content;
      return m;
    }
    case "tool": {
      if (typeof v.tool_call_id !== "string") throw badRequest(`${p}.tool_call_id`, "a tool message needs the id of the call it answers");
      return { role, content: textOf(v.content, `${p}.content`, false), tool_call_id: v.tool_call_id, ...(typeof v.name === "string" ? { name: v.name } : {}) };
    }
    default:
      throw badRequest(`${p}.role`, `expected system, developer, user, assistant or tool; got ${JSON.stringify(v.role)}`);
  }
}

function tool(v: unknown, i: number): ToolSpec {
  const p = `tools[${i}]`;
  if (!isObj(v) || v.type !== "function" || !isObj(v.function)) throw badRequest(p, 'expected { "type": "function", "function": { "name", "description", "parameters" } }');
  const f = v.function;
  if (typeof f.name !== "string" || !TOOL_NAME.test(f.name)) throw badRequest(`${p}.function.name`, "a function name is 1-64 letters, digits, _ or -");
  if (f.description !== undefined && typeof f.description !== "string") throw badRequest(`${p}.function.description`, "expected a string");
  if (f.parameters !== undefined && !isObj(f.parameters)) throw badRequest(`${p}.function.parameters`, "expected a JSON schema object");
  return { type: "function", function: { ...f, name: f.name } as ToolSpec["function"] };
}

function num(v: unknown, param: string, lo: number, hi: number, integer = false): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v) || v < lo || v > hi || (integer && !Number.isInteger(v))) {
    throw badRequest(param, `expected ${integer ? "an integer" : "a number"} from ${lo} to ${hi}; got ${JSON.stringify(v)}`);
  }
  return v;
}

/** Fields that change the output and that the endpoint cannot honour: refused unless at their neutral value. */
const UNSUPPORTED: Array<[string, (v: unknown) => boolean, string]> = [
  ["response_format", (v) => isObj(v) && v.type !== "text", "structured outputs are not supported; ask for JSON in the prompt and parse it"],
  ["frequency_penalty", (v) => typeof v === "number" && v !== 0, "penalties are not supported (the trained policy samples from its own distribution)"],
  ["presence_penalty", (v) => typeof v === "number" && v !== 0, "penalties are not supported (the trained policy samples from its own distribution)"],
  ["logit_bias", (v) => isObj(v) && Object.keys(v).length > 0, "logit_bias is not supported"],
  ["audio", (v) => v !== undefined && v !== null, "audio output is not supported"],
  ["prediction", (v) => v !== undefined && v !== null, "predicted outputs are not supported"],
];

/** Checks and normalises a request body (parsed JSON). Throws EndpointError(400) naming the field. */
export function parseChatRequest(body: unknown): ChatRequest {
  if (!isObj(body)) throw badRequest("body", "expected a JSON object");
  if (typeof body.model !== "string" || body.model === "") throw badRequest("model", "expected the model's name (GET /v1/models lists it)", "missing_required_parameter");
  if (!Array.isArray(body.messages) || body.messages.length === 0) throw badRequest("messages", "expected a non-empty array of messages", "missing_required_parameter");
  for (const [field, refused, why] of UNSUPPORTED) if (refused(body[field])) throw badRequest(field, why, "unsupported_parameter");
  const messages = body.messages.map(message);
  const tools = body.tools === undefined || body.tools === null ? [] : Array.isArray(body.tools) ? body.tools.map(tool) : (() => { throw badRequest("tools", "expected an array of tools"); })();
  const names = new Set(tools.map((t) => t.function.name));
  if (names.size !== tools.length) throw badRequest("tools", "two tools have the same name");
  let toolChoice: ToolChoice = tools.length > 0 ? "auto" : "none";
  const tc = body.tool_choice;
  if (tc === "auto" || tc === "none" || tc === "required") toolChoice = tc;
  else if (isObj(tc) && isObj(tc.function) && typeof tc.function.name === "string") toolChoice = { name: tc.function.name };
  else if (tc !== undefined && tc !== null) throw badRequest("tool_choice", 'expected "auto", "none", "required" or { "type": "function", "function": { "name" } }');
  if (toolChoice !== "auto" && toolChoice !== "none" && tools.length === 0) throw badRequest("tool_choice", "needs tools");
  if (typeof toolChoice === "object" && !names.has(toolChoice.name)) throw badRequest("tool_choice", `names '${toolChoice.name}', which is not among the tools (${[...names].join(", ")})`);
  const stop = body.stop === undefined || body.stop === null ? [] : typeof body.stop === "string" ? [body.stop] : body.stop;
  if (!Array.isArray(stop) || stop.length > 4 || !stop.every((s) => typeof s === "string" && s.length > 0)) throw badRequest("stop", "expected a non-empty string or up to 4 of them");
  const logprobs = body.logprobs === true;
  const topLogprobs = num(body.top_logprobs, "top_logprobs", 0, 20, true) ?? 0;
  if (topLogprobs > 0 && !logprobs) throw badRequest("top_logprobs", "needs logprobs: true");
  const maxTokens = num(body.max_completion_tokens, "max_completion_tokens", 1, 1e9, true) ?? num(body.max_tokens, "max_tokens", 1, 1e9, true);
  const so = body.stream_options;
  if (so !== undefined && so !== null && !isObj(so)) throw badRequest("stream_options", "expected an object");
  return {
    model: body.model,
    messages,
    tools,
    toolChoice,
    temperature: num(body.temperature, "temperature", 0, 2),
    topP: num(body.top_p, "top_p", 0, 1),
    maxTokens,
    stop: stop as string[],
    seed: num(body.seed, "seed", Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true),
    n: num(body.n, "n", 1, MAX_CHOICES, true) ?? 1,
    logprobs,
    topLogprobs,
    stream: body.stream === true,
    includeUsage: isObj(so) && so.include_usage === true,
  };
}
