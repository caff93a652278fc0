/**
 * The calculator as an environment of the RL layer: a turn that stopped at
 * `</calc>` is answered with ` <result> N </result> ` for the expression
 * between `<calc>` and `</calc>` (the safe parser, expression.ts), or with
 * ` <result> error : WHY </result> ` when it has no value (the policy reads
 * why; the sample goes on); past the layer's call limit, with the protocol's
 * notice; `</answer>` ends the episode. The environment is pure: nothing to
 * build per executor, nothing to close.
 */
import type { Environment, EnvStep, EnvTurn } from "../../rl/environment.js";
import type { TaskItem } from "../../rl/types.js";
import { ExpressionError, evaluate } from "./expression.js";

/** The protocol's words (the tiny vocabulary spells every one; tags are single tokens). */
export const CALC_TEXT = {
  instruction: "answer the question . you can calculate : write <calc> expression </calc> and the result comes back inside <result> </result> . give the final answer inside <answer> </answer> .",
  question: "question : {question}",
  limit: "no more calculations : give the answer now .",
  empty: "error : write an expression inside <calc> </calc> .",
};

/** Tags: one token each in the tiny vocabulary. */
export const CALC_TAGS = ["<calc>", "</calc>", "<result>", "</result>", "<answer>", "</answer>"];
export const CALC_STOPS = ["</calc>", "</answer>"];

/** The prompt of a question (the environment's reset and the warm start's demonstrations share it). */
export function calcPrompt(question: string): { system: string; user: string } {
  return { system: CALC_TEXT.instruction, user: CALC_TEXT.question.replaceAll("{question}", question) };
}

/** The expression of a turn that ended with `</calc>`: what follows its last `<calc>` (null: none, or empty). */
export function parseCalc(turn: string): string | null {
  const end = turn.lastIndexOf("</calc>");
  const body = end < 0 ? turn : turn.slice(0, end);
  const start = body.lastIndexOf("<calc>");
  if (start < 0) return null;
  const e = body.slice(start + "<calc>".length).trim();
  return e === "" ? null : e;
}

/** What is inserted after a call: the result block, with spaces around it. */
export function resultBlock(inner: string): string {
  return ` <result> ${inner} </result> `;
}

/** The tool's answer to `expression`: its value, or the parser's reason. */
export function calculate(expression: string): { text: string; ok: boolean } {
  try {
    return { text: String(evaluate(expression)), ok: true };
  } catch (err) {
    if (err instanceof ExpressionError) return { text: `error : ${err.message}`, ok: false };
    throw err;
  }
}

/** The calculator environment (module `environment.js`, export `CalculatorEnvironment`). */
export class CalculatorEnvironment implements Environment<null> {
  readonly name = "calculator";
  readonly stops = CALC_STOPS;

  reset(item: TaskItem): { system: string; user: string; state: null } {
    return { ...calcPrompt(item.question), state: null };
  }

  step(_state: null, turn: EnvTurn): EnvStep {
    if (turn.stop === "</answer>") return { done: true };
    const expression = parseCalc(turn.text);
    if (expression === null) return { observation: resultBlock(CALC_TEXT.empty) };
    if (turn.callsLeft <= 0) return { observation: resultBlock(CALC_TEXT.limit) };
    return { observation: resultBlock(calculate(expression).text), call: expression };
  }
}
