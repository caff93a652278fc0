/**
 * A replay with the tool code reloaded (real processes): a calculator run
 * whose own tool rounds results to tens takes a step; the tool is fixed and
 * `reloadEnvironment()` makes the rollout executors import it afresh. A
 * replay as recorded still equals the recording (the rounded results
 * inserted as they were); a replay with `environment: "current"` runs the
 * episode at the version it was sampled with against the fixed tool, whose
 * results are then the exact values, and is not claimed equal.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { calculator } from "../../sdk/envs/calculator/package.js";
import { calcRecipe } from "../../sdk/envs/calculator/recipe.js";
import { CALCULATOR_ENVIRONMENT } from "../../sdk/envs/calculator/reward.js";
import { AgentRun } from "../../sdk/rl/run/run.js";
import type { EnvironmentPackage } from "../../sdk/rl/run/recipe.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

const work = mkdtempSync(path.join(os.tmpdir(), "hearth-replay-reload-"));
// Executors run as their app's own user here (the test runs as root): the tool must be readable by others.
chmodSync(work, 0o755);
const toolFile = path.join(work, "my-calc.mjs");
let cluster: TestCluster;

/** A calculator tool of its own whose results go through `result`. */
function writeTool(result: string): void {
  writeFileSync(toolFile, `import { calcPrompt, parseCalc, resultBlock, calculate } from ${JSON.stringify(CALCULATOR_ENVIRONMENT.module)};
export class MyCalc {
  name = "my-calc";
  stops = ["</calc>", "</answer>"];
  reset(item) { return { ...calcPrompt(item.question), state: null }; }
  step(_state, turn) {
    if (turn.stop === "</answer>") return { done: true };
    const expression = parseCalc(turn.text);
    if (expression === null || turn.callsLeft === 0) return { observation: resultBlock("error : write an expression inside <calc> </calc> .") };
    const r = calculate(expression);
    const result = (v) => ${result};
    return { observation: resultBlock(r.ok ? String(result(Number(r.text))) : r.text), call: expression };
  }
}
`);
  chmodSync(toolFile, 0o644);
}

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});
after(async () => {
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("a replay runs the episode against the reloaded tool at the version it was sampled with; as recorded it still equals the recording", async () => {
  writeTool("Math.round(v / 10) * 10");
  const spec = { module: toolFile, export: "MyCalc" };
  const pkg: EnvironmentPackage = {
    ...calculator,
    name: "my-calc",
    recipeFor: () => ({ ...calcRecipe, prepare: async (o) => { const t = await calcRecipe.prepare(o); return { ...t, environment: { ...t.environment, spec } }; } }),
  };
  const run = await AgentRun.create({ head: cluster.endpoint, name: "reload", out: path.join(work, "out"), evalEvery: 0, evalSize: 8, promptsPerStep: 4, groupSize: 4, seed: 2, log: () => undefined }, pkg);
  try {
    const r = await run.step();
    // A sample whose first calculation's product the buggy tool rounded.
    const product = (response: string): number | undefined => {
      const m = /<calc> (\d+) \* (\d+) <\/calc>/.exec(response);
      return m ? Number(m[1]) * Number(m[2]) : undefined;
    };
    const i = r.samples.findIndex((x) => (product(x.response) ?? 0) % 10 !== 0);
    assert.ok(i >= 0, "a sample whose product the buggy tool rounded");
    const s = r.samples[i]!;
    const exact = product(s.response)!;
    assert.match(s.response, new RegExp(`<result> ${Math.round(exact / 10) * 10} </result>`), "recorded: the rounded result");

    writeTool("v");
    await run.reloadEnvironment();
    const recorded = await run.replay({ sample: i });
    assert.equal(recorded.matched, true, "as recorded, the replay still equals the recording");
    const current = await run.replay({ sample: i, environment: "current" });
    assert.equal(current.matched, false, "with the tools run again it is not claimed equal");
    assert.equal(current.json.version, s.policyVersion, "at the version it was sampled with");
    const inserted = current.json.tokens.filter((t) => t.kind === "observation").map((t) => t.text).join("");
    assert.match(inserted, new RegExp(`<result> ${exact} </result>`), `the fixed tool's exact result ${exact} was inserted`);
    assert.doesNotMatch(inserted, new RegExp(`<result> ${Math.round(exact / 10) * 10} </result>`));
  } finally {
    await run.close();
  }
});
