/**
 * Search-R1 end to end on real processes with the tiny model: a short
 * bootstrap, three GRPO steps, metrics.jsonl fields, rollout and trainer
 * weights bit-identical after the steps, and a resumed run that continues
 * exactly where the checkpoint left off.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { SearchR1Run, type SearchR1Options, type StepMetrics } from "../../sdk/searchr1/run.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

let cluster: TestCluster;
const home = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-home-"));
const outA = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-a-"));
const outB = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-b-"));

before(async () => {
  process.env.HEARTH_HOME = home; // the bootstrap cache lives here
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

function options(out: string, extra: Partial<SearchR1Options> = {}): Partial<SearchR1Options> {
  return {
    head: cluster.endpoint,
    name: `e2e-${path.basename(out)}`,
    out,
    steps: 3,
    promptsPerStep: 4,
    promptsPerTask: 2,
    groupSize: 4,
    evalSize: 8,
    evalEvery: 0,
    bootstrapSteps: 4,
    seed: 7,
    log: () => undefined,
    ...extra,
  };
}

test("three steps write every metrics field, and rollouts end bit-identical to the trainers", async () => {
  const run = await SearchR1Run.create(options(outA));
  try {
    const results: StepMetrics[] = [];
    for (let i = 0; i < 3; i++) results.push((await run.step()).metrics);
    const lines = readFileSync(path.join(outA, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as StepMetrics);
    assert.deepEqual(lines.map((m) => m.step), [1, 2, 3]);
    for (const m of lines) {
      for (const k of ["reward_mean", "em", "searches_per_sample", "groups_kept", "groups_dropped", "samples_trained", "tokens", "rollout_s", "update_s", "publish_bytes", "step_s"] as const) {
        assert.equal(typeof m[k], "number", `metrics.jsonl has ${k}`);
        assert.ok(Number.isFinite(m[k]));
      }
      assert.equal(m.groups_kept + m.groups_dropped, 4);
      assert.ok(m.tokens > 0);
    }
    // Make sure every rollout executor has synced to the latest publication, then compare policies.
    await run.evaluate();
    const d = await run.digests();
    assert.deepEqual(d.trainers.map((t) => t.rank), [0, 1], "every trainer rank answered");
    assert.equal(d.trainers[1]!.digest, d.trainers[0]!.digest, "trainer ranks agree");
    assert.equal(d.rollouts.length, 2, "every rollout executor answered, each addressed by id");
    assert.equal(new Set(d.rollouts.map((r) => r.executorId)).size, 2);
    for (const r of d.rollouts) assert.equal(r.digest, d.trainers[0]!.digest, `rollout ${r.executorId} holds exactly the trainers' bf16 weights`);
    const ckpt = JSON.parse(readFileSync(path.join(outA, "checkpoint.json"), "utf8"));
    assert.equal(ckpt.step, 3);
    assert.match(ckpt.weights.key, /weights$/);
    await run.saveCheckpoint();
  } finally {
    await run.close();
  }
});

test("resume from a checkpoint continues exactly: step 3 after resuming at 2 equals step 3 of the run that never stopped", async () => {
  const first = await SearchR1Run.create(options(outB));
  try {
    await first.step();
    await first.step();
    await first.saveCheckpoint();
  } finally {
    await first.close();
  }
  const resumed = await SearchR1Run.create(options(outB, { name: "e2e-resumed", resume: path.join(outB, "checkpoint") }));
  try {
    assert.equal(resumed.stepsDone, 2);
    const third = (await resumed.step()).metrics;
    const straight = readFileSync(path.join(outA, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as StepMetrics)[2]!;
    assert.equal(third.step, 3);
    for (const k of ["reward_mean", "searches_per_sample", "groups_kept", "samples_trained", "tokens"] as const) {
      assert.equal(third[k], straight[k], `${k} after resume equals the uninterrupted run`);
    }
  } finally {
    await resumed.close();
  }
});

test("the live agreement check: logprob gap, KL, ratio, clip fraction, entropy, loss and grad norm per step; a rollout that skipped a patch makes it fire", async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-c-"));
  const lines: string[] = [];
  // Sampling hot (temperature 3) so the barely warmed-up policy writes varied responses.
  const run = await SearchR1Run.create(options(out, { lr: 1e-2, temperature: 3, logprobGapWarn: 0.01, log: (l) => lines.push(l) }));
  try {
    // A random policy rarely answers right; a reward on the response length varies within groups, so every step trains.
    run.setReward((response) => (response.length % 2 === 0 ? 1 : 0));
    const first = (await run.step()).metrics;
    assert.ok(first.samples_trained > 0);
    for (const k of ["logprob_gap", "logprob_gap_max", "kl", "ratio_mean", "ratio_max", "clip_frac", "entropy", "loss", "grad_norm"] as const) {
      assert.equal(typeof first[k], "number", `metrics has ${k}`);
      assert.ok(Number.isFinite(first[k]), `${k} is finite`);
    }
    const written = JSON.parse(readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n")[0]!) as StepMetrics;
    assert.equal(written.logprob_gap, first.logprob_gap, "the checks reach metrics.jsonl");
    // In sync the gap is the bf16 rounding of the published weights against the trainers' fp32 master (~1e-3 here).
    assert.ok(first.logprob_gap! < 0.01, `in sync, sampler and trainer agree (gap ${first.logprob_gap})`);
    assert.ok(Math.abs(first.ratio_mean! - 1) < 1e-3, "ratio ~1 on the first epoch");
    assert.ok(!lines.some((l) => l.startsWith("warning:")), "no warning while in sync");
    const [stale] = await run.rolloutPool.members();
    await run.rolloutPool.callMember(stale!.executorId, "skipSyncs", 1);
    const second = (await run.step()).metrics;
    console.log(`# logprob gap in sync ${first.logprob_gap}, with one rollout a patch behind ${second.logprob_gap}`);
    assert.ok(second.logprob_gap! > 0.01 && second.logprob_gap! > 5 * first.logprob_gap!, `a stale rollout widens the gap (${first.logprob_gap} → ${second.logprob_gap})`);
    assert.match(lines.join("\n"), /warning: step 2: the sampler's logprobs differ from the trainer's/);
  } finally {
    await run.close();
  }
});
