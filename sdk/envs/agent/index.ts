/**
 * The agent tasks (`hearth/agents`): the calculator and the chain task for
 * agents written against the OpenAI Chat Completions API, with the tools
 * their shipped starting policies know and the plain functions that run
 * them, the exact-match reward on an agent's answer, and the chat format
 * those policies speak (Qwen2.5's template and `<tool_call>` JSON).
 *
 * @example
 * ```ts
 * // A calculator agent with the Vercel AI SDK, trained by `hearth train agent`.
 * import { generateText, stepCountIs, tool } from "ai";
 * import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
 * import { z } from "zod";
 * import { CALC_DESCRIPTION, runCalc } from "hearth/agents";
 *
 * export async function calculatorAgent(item: { question: string }, { baseURL, apiKey, model, signal }: { baseURL: string; apiKey: string; model: string; signal?: AbortSignal }) {
 *   const llm = createOpenAICompatible({ name: "hearth", baseURL, apiKey });
 *   const calc = tool({ description: CALC_DESCRIPTION, inputSchema: z.object({ expression: z.string() }), execute: async (args) => runCalc(args) });
 *   const { text } = await generateText({ model: llm(model), tools: { calc }, prompt: item.question, stopWhen: stepCountIs(5), abortSignal: signal });
 *   return text;
 * }
 * ```
 */
export { agentCalculator, agentChain } from "./package.js";
export { CALC_TOOL, SEARCH_TOOL, CALC_DESCRIPTION, SEARCH_DESCRIPTION, TOOL_VARIANTS, runCalc, chainSearch, calcResult, searchResult, chainWorld, passageText, CHAIN_WORLD, SEARCH_TOP_K, CALC_TOOLSET, SEARCH_TOOLSET, type AgentToolset } from "./tools.js";
export { agentAnswer, agentCalcReward, agentChainReward, AGENT_CALC_ENVIRONMENT, AGENT_CHAIN_ENVIRONMENT } from "./reward.js";
export { AgentCalcEnvironment, AgentChainEnvironment, ToolChatEnvironment, CALLS_EXHAUSTED } from "./environment.js";
export { parseToolCalls, type ToolCall, type ParsedTurn } from "./tool-calls.js";
export {
  AGENT_CHAT_TEMPLATE,
  AGENT_SPECIAL,
  QWEN_DEFAULT_SYSTEM,
  templateJson,
  toolCallText,
  callTurn,
  answerTurn,
  toolResponses,
  systemWithTools,
  renderAgentChat,
  finalTurn,
} from "./chat-format.js";
export { agentTokenizerFiles, corpusWords, pieces, addedSections, AGENT_SPLIT, SPECIAL_TOKENS, TEMPLATE_TOKENS, MAX_NUMBER_WORD } from "./agent-tokenizer.js";
export { episodeDemo, episodePieces, episodeMessages, promptText, firstMessages, exploringScript, drawPrompt, type EpisodeScript, type PathStep, type PromptVariants } from "./conversation.js";
export { agentCalcRecipe, prepareAgentCalc, agentCalcPlan, AGENT_CALC_POLICY, AGENT_CALC_RECIPE, AGENT_CALC_EXPLORE, AGENT_CALC_SYSTEMS } from "./recipes/calculator.js";
export { agentChainRecipe, prepareAgentChain, agentChainPlan, AGENT_CHAIN_POLICY, AGENT_CHAIN_RECIPE, AGENT_CHAIN_EXPLORE, AGENT_CHAIN_SYSTEMS } from "./recipes/chain.js";
export { agentDemonstrations, prose, type AgentPreparedTask, type AgentQuestion } from "./recipes/common.js";
