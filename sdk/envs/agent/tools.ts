/**
 * The agent tasks' tools, as OpenAI function declarations and as plain
 * functions an agent calls to run them:
 *
 *   calc   { expression: string }  the calculator's own safe parser (whole numbers, + - * /, parentheses):
 *                                  the value as text, or "error: <why>"
 *   search { query: string }       BM25 over the chain task's passages: the best three, one a line
 *
 * `CALC_TOOL` and `SEARCH_TOOL` are declared the way the Vercel AI SDK sends
 * a zod `z.object({ expression: z.string() })` tool with the description
 * given here (`$schema`, `additionalProperties: false`): the environment
 * path renders them, and the shipped policies were also trained on the other
 * shapes agents send (`TOOL_VARIANTS`: no description, the openai SDK's
 * hand-written schema, a described parameter, `strict`), so a change in the
 * tool JSON of the system turn does not throw them off.
 *
 * @example
 * ```ts
 * import { tool } from "ai";
 * import { z } from "zod";
 * import { CALC_DESCRIPTION, runCalc } from "hearth/agents";
 * const calc = tool({ description: CALC_DESCRIPTION, inputSchema: z.object({ expression: z.string() }), execute: async (args) => runCalc(args) });
 * ```
 */
import type { ToolSpec } from "../../rl/text/chat-messages.js";
import { ExpressionError, evaluate } from "../calculator/expression.js";
import { Bm25Index } from "../searchr1/retrieval/bm25.js";
import { chainTask, type ChainTask } from "../searchr1/tasks/chain-task.js";
import type { ToolCall } from "./tool-calls.js";

/** The calc tool's description (an agent declares it with this text to meet the policy's training). */
export const CALC_DESCRIPTION = "Evaluate an arithmetic expression: whole numbers, + - * / and parentheses. Returns its value.";

/** The search tool's description. */
export const SEARCH_DESCRIPTION = "Search the encyclopedia. Returns the passages that match the query best, one a line.";

/** A tool's parameters as zod → JSON schema writes them (what the AI SDK sends). */
function zodParameters(name: string): Record<string, unknown> {
  return { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { [name]: { type: "string" } }, required: [name], additionalProperties: false };
}

/** The calc tool as the Vercel AI SDK declares it (the environment path's rendering). */
export const CALC_TOOL: ToolSpec = { type: "function", function: { name: "calc", description: CALC_DESCRIPTION, parameters: zodParameters("expression") } };

/** The search tool as the Vercel AI SDK declares it. */
export const SEARCH_TOOL: ToolSpec = { type: "function", function: { name: "search", description: SEARCH_DESCRIPTION, parameters: zodParameters("query") } };

/** Other ways agents declare a one-string-parameter tool, which the warm start also renders. */
function variantsOf(t: ToolSpec, param: string, paramText: string): ToolSpec[] {
  const { name, description } = t.function;
  const plain = { type: "object", properties: { [param]: { type: "string" } }, required: [param] };
  return [
    t,
    // The openai SDK with a hand-written schema and no description.
    { type: "function", function: { name, parameters: plain } },
    // A described parameter, no $schema.
    { type: "function", function: { name, description, parameters: { type: "object", properties: { [param]: { type: "string", description: paramText } }, required: [param] } } },
    // Structured outputs' strict mode.
    { type: "function", function: { name, description, parameters: { ...plain, additionalProperties: false }, strict: true } },
  ];
}

/** The renderings of each tool the warm start trains on (the first is the AI SDK's, `CALC_TOOL`/`SEARCH_TOOL`). */
export const TOOL_VARIANTS: Readonly<Record<"calc" | "search", readonly ToolSpec[]>> = {
  calc: variantsOf(CALC_TOOL, "expression", "an arithmetic expression, e.g. 37 * 48"),
  search: variantsOf(SEARCH_TOOL, "query", "what to look up, e.g. a name"),
};

/** What the calc tool answers `expression`: its value, or the parser's reason ("error: division by zero at 3"). */
export function calcResult(expression: string): string {
  try {
    return String(evaluate(expression));
  } catch (err) {
    if (err instanceof ExpressionError) return `error: ${err.message}`;
    throw err;
  }
}

/** Runs the calc tool on its arguments (`{ expression }`), as an agent's tool does. */
export function runCalc(args: { expression: string }): string {
  if (typeof args?.expression !== "string") return "error: calc takes { expression: string }";
  return calcResult(args.expression);
}

/** The chain task's world: the same as the Search-R1 chain recipe's (the warm start and the index depend on it). */
export const CHAIN_WORLD = { seed: 1, people: 1200, heldOut: 200 } as const;

/** Passages per search. */
export const SEARCH_TOP_K = 3;

let world: { task: ChainTask; index: Bm25Index } | undefined;

/** The chain task's world and its index, built on first use (deterministic: the same on every process). */
export function chainWorld(): { task: ChainTask; index: Bm25Index } {
  if (!world) {
    const task = chainTask(CHAIN_WORLD);
    world = { task, index: Bm25Index.build(task.corpus) };
  }
  return world;
}

/** A passage as the search tool writes it: the corpus's spaced words as prose ("tomar is a city in vel."). */
export function passageText(text: string): string {
  return text.replace(/ ([.,?!])/g, "$1");
}

/** What the search tool answers `query`: its best passages, one a line ("no results" when none matches). */
export function searchResult(query: string, k = SEARCH_TOP_K): string {
  const hits = chainWorld().index.search(query, k);
  return hits.length === 0 ? "no results" : hits.map((h) => passageText(h.text)).join("\n");
}

/** Runs the search tool on its arguments (`{ query }`) over the chain task's passages, as an agent's tool does. */
export function chainSearch(args: { query: string }): string {
  if (typeof args?.query !== "string") return "error: search takes { query: string }";
  return searchResult(args.query);
}

/** A task's tools: how they are declared, and how a call of one runs (what its result says, and the call as metrics count it). */
export interface AgentToolset {
  /** The declarations the environment path renders (the AI SDK's). */
  tools: readonly ToolSpec[];
  /** Runs one call (already checked against the declarations): the result's text. */
  run(call: ToolCall): string;
  /** The call in a word or two for metrics and views (the expression, the query). */
  describe(call: ToolCall): string;
}

/** The calculator task's tools. */
export const CALC_TOOLSET: AgentToolset = {
  tools: [CALC_TOOL],
  run: (c) => runCalc(c.arguments as { expression: string }),
  describe: (c) => String(c.arguments.expression),
};

/** The chain task's tools. */
export const SEARCH_TOOLSET: AgentToolset = {
  tools: [SEARCH_TOOL],
  run: (c) => chainSearch(c.arguments as { query: string }),
  describe: (c) => String(c.arguments.query),
};
