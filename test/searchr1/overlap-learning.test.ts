/**
 * Learning on the embedded default holds with overlapped rollouts (maxLag 1):
 * from the shipped starting policy (held-out EM ≤ 20 %), held-out EM gains
 * at least 30 points within 60 GRPO steps (the synchronous loop with seed 1
 * gains 28 points by step 30 and 38 by step 50: RL has to discover chained
 * searches, docs/results.md), with every trained trajectory at most one
 * version behind. The defaults are the recipe's (tiny model, chain
 * task, 2 rollouts, a gang of 2 trainers).
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

let cluster: TestCluster;

before(async () => {
  process.env.HEARTH_HOME = mkdtempSync(path.join(os.tmpdir(), "hearth-overlap-learn-home-"));
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

test("maxLag 1 on the embedded default: held-out EM from ≤ 20 % gains ≥ 30 points within 60 steps, lag ≤ 1 throughout", async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-overlap-learn-"));
  const run = await SearchR1Run.create({ head: cluster.endpoint, name: "overlap-learn", out, maxLag: 1, evalEvery: 5, log: () => undefined });
  try {
    const start = await run.evaluate();
    assert.ok(start.em <= 0.2, `the starting policy answers ≤ 20 % of held-out questions (got ${(start.em * 100).toFixed(1)} %)`);
    const curve: string[] = [];
    let best = start.em;
    for (let i = 0; i < 60 && best < start.em + 0.3; i++) {
      const m = (await run.step()).metrics;
      assert.ok(m.policy_lag_max! <= 1, `step ${m.step}: lag ${m.policy_lag_max} ≤ 1`);
      if (m.eval_em !== undefined) {
        curve.push(`step ${m.step}: ${(m.eval_em * 100).toFixed(1)} %`);
        best = Math.max(best, m.eval_em);
      }
    }
    console.log(`# held-out EM at maxLag 1: ${(start.em * 100).toFixed(1)} % → ${curve.join(", ")}`);
    assert.ok(best >= start.em + 0.3, `held-out EM gained ≥ 30 points (${(start.em * 100).toFixed(1)} % → ${curve.join(", ")})`);
    assert.ok(run.history.some((m) => m.policy_lag_max === 1), "the steps did overlap (some trained on trajectories one version behind)");
  } finally {
    await run.close();
  }
});
