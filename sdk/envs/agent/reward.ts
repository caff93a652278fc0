/**
 * The agent tasks' answer and rewards, on either form an answer arrives in:
 * an environment-path response (the generated and inserted text after the
 * prompt: the answer is its final assistant turn, after the last
 * `<|im_start|>assistant\n` and before `<|im_end|>`) or the bare string an
 * agent returns (the last assistant message's text). A final turn that is a
 * tool call (an episode cut short) has no answer.
 *
 *   agentCalcReward("…<|im_start|>assistant\n1557<|im_end|>", ["1557"])  // 1
 *   agentCalcReward("1557", ["1557"])                                    // 1
 *   agentChainReward("Vel.", ["vel"])                                    // 1 (SQuAD normalisation)
 */
import { fileURLToPath } from "node:url";
import type { EnvironmentSpec } from "../../rl/environment.js";
import type { RewardFn } from "../../rl/types.js";
import { exactMatch } from "../searchr1/reward.js";
import { finalTurn } from "./chat-format.js";

/** The environment classes, as rollout executors load them. */
export const AGENT_CALC_ENVIRONMENT: EnvironmentSpec = { module: fileURLToPath(new URL("./environment.js", import.meta.url)), export: "AgentCalcEnvironment" };
export const AGENT_CHAIN_ENVIRONMENT: EnvironmentSpec = { module: fileURLToPath(new URL("./environment.js", import.meta.url)), export: "AgentChainEnvironment" };

/** The answer of a response or of an agent's returned text: its final assistant turn, trimmed (null: none, or a tool call). */
export function agentAnswer(text: string): string | null {
  const turn = finalTurn(text);
  if (turn.includes("<tool_call>")) return null;
  const a = turn.trim();
  return a === "" ? null : a;
}

/** The whole number an answer is, or null (`0036` is 36; `36 apples` is no number). */
function numberOf(text: string | null): number | null {
  if (text === null) return null;
  const t = text.replace(/\s+/g, "");
  return /^[-+]?\d+$/.test(t) ? Number(t) : null;
}

/** The calculator task's reward and exact match: 1 when the answer is the gold number. */
export const agentCalcReward: RewardFn = (response, golds) => {
  const n = numberOf(agentAnswer(response));
  return n !== null && golds.some((g) => numberOf(g) === n) ? 1 : 0;
};

/** The chain task's reward and exact match: 1 when the answer is the gold name (after SQuAD normalisation). */
export const agentChainReward: RewardFn = (response, golds) => {
  const a = agentAnswer(response);
  return a === null ? 0 : exactMatch(a, golds);
};
