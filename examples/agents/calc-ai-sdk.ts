/**
 * A calculator agent written with the Vercel AI SDK, as anyone writes one:
 * `generateText` with a `calc` tool over several steps against an
 * OpenAI-compatible endpoint. hearth trains it unchanged:
 *
 *   npm run demo -- --agent examples/agents/calc-ai-sdk.ts#solve
 *   npm run hearth -- train agent --task calculator --agent examples/agents/calc-ai-sdk.ts#solve
 *
 * The tool's description and its `{ expression }` argument are the ones the
 * calculator task's starting policy knows (`hearth/agents`).
 */
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";
import { CALC_DESCRIPTION, runCalc } from "hearth/agents";

/** What hearth hands an agent besides its task item. */
export interface AgentContext {
  baseURL: string;
  apiKey: string;
  model: string;
  signal: AbortSignal;
}

/** Solves one word problem; returns the final answer (the last assistant message's text). */
export async function solve(item: { id: string; question: string }, ctx: AgentContext): Promise<string> {
  const llm = createOpenAICompatible({ name: "hearth", baseURL: ctx.baseURL, apiKey: ctx.apiKey });
  const calc = tool({ description: CALC_DESCRIPTION, inputSchema: z.object({ expression: z.string() }), execute: async ({ expression }) => runCalc({ expression }) });
  const { text } = await generateText({ model: llm(ctx.model), tools: { calc }, prompt: item.question, stopWhen: stepCountIs(6), abortSignal: ctx.signal, maxRetries: 0 });
  return text;
}
