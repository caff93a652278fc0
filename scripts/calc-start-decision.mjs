#!/usr/bin/env node
/**
 * What a calculator agent policy does after its first tool result on the
 * held-out problems that need more calls: the probability (teacher-forced)
 * of the answer's first token and of the next call's, by problem kind, and
 * on how many the call is the greedy choice (that is what lifts a start's
 * held-out EM above the one-call problems' share).
 *
 *   npm run build && node scripts/calc-start-decision.mjs [POLICY_DIR]
 *
 * POLICY_DIR defaults to the shipped policies/tiny-agent-calc. Prompts as the
 * environment path renders them (the first tool rendering, no system message).
 */
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const dist = (p) => import(path.join(root, "dist", p));
const { agentCalcQuestion, prepareAgentCalc } = await dist("sdk/envs/agent/recipes/calculator.js");
const { calcTask } = await dist("sdk/envs/calculator/task.js");
const { TOOL_VARIANTS } = await dist("sdk/envs/agent/tools.js");
const { episodeDemo, exploringScript } = await dist("sdk/envs/agent/conversation.js");
const { TensorEngine } = await dist("sdk/tensor/engine.js");

const dir = path.resolve(process.argv[2] ?? path.join(root, "policies", "tiny-agent-calc"));
const { tokenizer } = prepareAgentCalc({ data: "synthetic", evalSize: 200 });
const engine = await TensorEngine.start({});
try {
  await engine.initModel({ checkpoint: dir, device: "cpu", dtype: "float32", threads: 2 });
  const rows = new Map();
  for (const q of calcTask({ seed: 1, perWeight: 400, heldOut: 200 }).heldOut) {
    if (q.calls.length < 2) continue;
    const { item, path: steps } = agentCalcQuestion(q);
    const prompt = { tools: [TOOL_VARIANTS.calc[0]] };
    // The same episode answering after its first call, and going on: they part at the decision.
    const answers = episodeDemo(tokenizer, exploringScript(() => 1, item.question, steps, [0, 0], prompt)).tokens;
    const goesOn = episodeDemo(tokenizer, exploringScript(() => 0, item.question, steps, [1, 1], prompt)).tokens;
    let at = 0;
    while (answers[at] === goesOn[at]) at++;
    const lp = async (tokens) => (await engine.logprobs(Int32Array.from(tokens.slice(0, at + 1)), 1, at + 1))[at];
    const pAnswer = Math.exp(await lp(answers));
    const pCall = Math.exp(await lp(goesOn));
    const top = (await engine.topK(Int32Array.from(answers.slice(0, at + 1)), 1, at + 1, 1)).ids[at];
    const r = rows.get(q.calls.length) ?? { n: 0, pAnswer: 0, pCall: 0, callWins: 0 };
    r.n++;
    r.pAnswer += pAnswer;
    r.pCall += pCall;
    if (top === goesOn[at]) r.callWins++;
    rows.set(q.calls.length, r);
  }
  console.log(`${dir}: after the first tool result, held-out problems needing more calls`);
  console.log("calls  problems  P(answer)  P(next call)  call is greedy");
  for (const [calls, r] of [...rows].sort((a, b) => a[0] - b[0])) {
    console.log(`${String(calls).padStart(5)}  ${String(r.n).padStart(8)}  ${(r.pAnswer / r.n).toFixed(3).padStart(9)}  ${(r.pCall / r.n).toFixed(3).padStart(12)}  ${String(r.callWins).padStart(6)} of ${r.n}`);
  }
} finally {
  await engine.close();
}
