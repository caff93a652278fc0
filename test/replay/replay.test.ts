/**
 * Replaying recorded samples of a real run (the tiny Search-R1 run, real
 * processes): replays equal the recordings token for token and logprob for
 * logprob, at two steps and from several batch positions; a recorded seed
 * or policy version that is not the one sampled with is reported as a
 * mismatch naming the first differing token, never shown as equal; a
 * version past the kept window fails saying how to keep more; top-k
 * alternatives are a distribution (sum ≤ 1) equal to the trainer's own
 * forward pass; a forced token changes what follows while the original and
 * the trainers stay untouched.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import type { ScoredSample } from "../../sdk/rl/types.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";
import { lengthParity, smallRun } from "../searchr1/small-run.js";

let cluster: TestCluster;
let run: SearchR1Run;
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-replay-"));

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
  // Versions: the start publishes v1, step k samples with vk and publishes v(k+1). A fresh base after every patch
  // (chains of two versions: v1–v2, v3–v4, v5) and chains ending more than two versions behind the latest dropped.
  run = await SearchR1Run.create(smallRun(cluster.endpoint, "replay", path.join(work, "out"), { replayVersions: 2, rebaseEvery: 1 }));
  run.setReward(lengthParity);
  for (let i = 0; i < 4; i++) await run.step();
});

after(async () => {
  await run?.close().catch(() => undefined);
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("replays equal the recordings token for token and logprob for logprob, at two steps and from several batch positions", async () => {
  for (const step of [3, 4]) {
    const samples = run.result(step).samples;
    assert.equal(samples.length, 16, "4 items × 4 samples, in two calls of 8 rows");
    for (const i of [0, 5, 9, 15]) {
      const s = samples[i]!;
      const ep = await run.replay({ step, sample: i });
      assert.equal(ep.matched, true);
      assert.equal(ep.json.version, s.policyVersion);
      assert.equal(s.policyVersion, step, "step k sampled with version k");
      // Checked here again, independently of the replay's own check.
      assert.deepEqual(ep.json.tokens.map((r) => r.id), [...s.tokens], `step ${step} sample ${i}: every token`);
      for (const r of ep.json.tokens) {
        if (r.kind === "generated") assert.equal(r.logprob, s.logprobs[r.i], `step ${step} sample ${i} token ${r.i}: its logprob, bit for bit`);
        assert.equal(r.kind === "generated", s.mask[r.i] === 1 && r.i >= s.promptLength, "generated exactly where the mask trained");
      }
    }
  }
});

test("a recorded seed or policy version other than the one sampled with is a mismatch naming the first differing token", async () => {
  const s: ScoredSample = run.result(4).samples[5]!;
  const { seed, policyVersion } = s;
  try {
    s.seed = seed! + 1;
    await assert.rejects(run.replay({ step: 4, sample: 5 }), (e: Error) => e.name === "ReplayMismatchError" && /differs from the recording at token \d+: recorded \d+ .*, replayed \d+|with logprob/.test(e.message));
    s.seed = seed;
    s.policyVersion = 3;
    await assert.rejects(run.replay({ step: 4, sample: 5 }), (e: Error) => e.name === "ReplayMismatchError" && /at token \d+/.test(e.message));
  } finally {
    s.seed = seed;
    s.policyVersion = policyVersion;
  }
  assert.equal((await run.replay({ step: 4, sample: 5 })).matched, true, "restored, it matches again");
});

test("a version past the kept window fails saying how to keep more; what is kept and its bytes are shown", async () => {
  const kept = run.keptVersions();
  assert.deepEqual(kept.ranges, [[3, 4], [5, 5]], "chains of a base and a patch; the one ending at v2 is past the window");
  assert.ok(kept.bytes > 0);
  await assert.rejects(run.replay({ step: 1, sample: 0 }), (e: Error) => /policy version 1 is not kept: the run keeps versions .*--replay-versions N/.test(e.message));
});

test("top-k alternatives sum to at most 1 and equal the trainer's own forward pass", async () => {
  // At the trainers' current version (v5): the rollouts hold its published bf16 values, the trainer its fp32 master.
  const ep = await run.replay({ step: 4, sample: 2, version: 5, topK: 5 });
  assert.equal(ep.matched, false, "another version is not compared");
  const tokens = ep.json.tokens.map((r) => r.id);
  const t = await run.trainerGang.callRank(0, "topK", tokens, 5);
  let checked = 0;
  for (const r of ep.json.tokens.filter((x) => x.kind === "generated")) {
    const top = r.top!;
    assert.equal(top.length, 5);
    assert.ok(top.reduce((n, a) => n + a.p, 0) <= 1 + 1e-6, `token ${r.i}: alternatives sum to at most 1`);
    assert.ok(top.every((a, k) => k === 0 || top[k - 1]!.p >= a.p), "most likely first");
    for (let k = 0; k < 5; k++) {
      const id = t.ids[r.i * 5 + k]!;
      const p = Math.exp(t.logprobs[r.i * 5 + k]!);
      const mine = top.find((a) => a.id === id);
      // bf16 rounding of the published weights: the trainer's probabilities agree to about 1e-2.
      if (p > 0.05) {
        assert.ok(mine, `token ${r.i}: the trainer's alternative ${id} (p ${p.toFixed(3)}) is among the replay's`);
        assert.ok(Math.abs(mine.p - p) < 0.02, `token ${r.i}, alternative ${id}: replay ${mine.p} vs trainer ${p}`);
        checked++;
      }
    }
  }
  assert.ok(checked > 10, `alternatives compared: ${checked}`);
});

test("a forced token changes what follows; the original and the trainers stay untouched", async () => {
  const s = run.result(4).samples[9]!;
  const before = { tokens: [...s.tokens], logprobs: [...s.logprobs] };
  const digests = () => run.trainerGang.broadcast("stateDigest", Array.from({ length: run.opts.trainers }, () => [] as []));
  const trainers = await digests();
  const ep = await run.replay({ step: 4, sample: 9 });
  const gen = ep.json.tokens.filter((r) => r.kind === "generated");
  assert.ok(gen.length >= 3);
  // Force, at the second generated token, what the policy found least likely there.
  const at = gen[1]!;
  const text = at.top!.at(-1)!.text;
  const branch = await ep.at(0, 1).force(text).continue();
  const forced = branch.branch.tokens.filter((r) => r.kind === "forced");
  assert.ok(forced.length >= 1, "the forced text is marked");
  assert.equal(forced[0]!.i, at.i);
  assert.deepEqual(branch.branch.tokens.slice(0, at.i).map((r) => r.id), [...s.tokens].slice(0, at.i), "the branch keeps the episode before the point");
  assert.ok(branch.divergesAt <= at.i, "and diverges there");
  assert.ok(branch.branch.tokens.slice(at.i + forced.length).some((r) => r.kind === "generated"), "generation went on after the forced text");
  assert.match(branch.terminal(), /what if: force .* at token \d+/);
  assert.deepEqual({ tokens: [...s.tokens], logprobs: [...s.logprobs] }, before, "the recorded sample is untouched");
  assert.deepEqual(await digests(), trainers, "a branch never trains");
  // The same branch again: the same seed, the same continuation.
  const again = await ep.at(0, 1).force(text).continue();
  assert.deepEqual(again.branch.tokens.map((r) => r.id), branch.branch.tokens.map((r) => r.id));
});
