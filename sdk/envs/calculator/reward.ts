/**
 * The calculator's answer and reward: the number in the response's last
 * `<answer> … </answer>`, exact match on it (a number written with a sign,
 * spaces or leading zeros is the same number).
 */
import { fileURLToPath } from "node:url";
import type { EnvironmentSpec } from "../../rl/environment.js";
import type { RewardFn } from "../../rl/types.js";

/** The environment's class, as rollout executors load it. */
export const CALCULATOR_ENVIRONMENT: EnvironmentSpec = { module: fileURLToPath(new URL("./environment.js", import.meta.url)), export: "CalculatorEnvironment" };

/** The answer a response gives (null: none). */
export function answerOf(response: string): string | null {
  const m = /<answer>([^<]*)<\/answer>[^<]*$/.exec(response);
  return m ? m[1]!.trim() : null;
}

/** The number of an answer, or null when it is not one whole number. */
function numberOf(text: string | null): number | null {
  if (text === null) return null;
  const t = text.replace(/\s+/g, "");
  return /^[-+]?\d+$/.test(t) ? Number(t) : null;
}

/** 1 when the answer is the gold number, else 0. */
export const calcReward: RewardFn = (response, golds) => {
  const n = numberOf(answerOf(response));
  return n !== null && golds.some((g) => numberOf(g) === n) ? 1 : 0;
};
