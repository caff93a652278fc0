/**
 * A research agent for the chain task written with the official `openai`
 * SDK: it searches the task's encyclopedia until it can answer.
 *
 *   npm run hearth -- train agent --task chain --agent examples/agents/chain-openai.ts#solve
 */
import OpenAI from "openai";
import { SEARCH_TOOL, chainSearch } from "hearth/agents";

/** Answers one question; returns the final answer. */
export async function solve(item: { id: string; question: string }, ctx: { baseURL: string; apiKey: string; model: string; signal: AbortSignal }): Promise<string> {
  const client = new OpenAI({ baseURL: ctx.baseURL, apiKey: ctx.apiKey, maxRetries: 0 });
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: item.question }];
  for (let turn = 0; turn < 6; turn++) {
    const r = await client.chat.completions.create({ model: ctx.model, messages, tools: [SEARCH_TOOL as OpenAI.Chat.ChatCompletionTool] }, { signal: ctx.signal });
    const m = r.choices[0]!.message;
    if (!m.tool_calls?.length) return m.content ?? "";
    messages.push({ role: "assistant", content: m.content ?? "", tool_calls: m.tool_calls });
    for (const call of m.tool_calls) {
      if (call.type !== "function") continue;
      messages.push({ role: "tool", tool_call_id: call.id, content: chainSearch(JSON.parse(call.function.arguments) as { query: string }) });
    }
  }
  return "";
}
