/**
 * Search-R1's behaviour, pinned: a small run of the embedded default's
 * recipe (the chain task from its shipped policy) at a fixed seed gives
 * exactly the metrics (every field but times), the trainer state (fp32
 * weights and AdamW moments of every rank), the rollouts' policies and the
 * held-out evaluation recorded in test/fixtures/searchr1-golden.json, which
 * was written by this test (HEARTH_WRITE_GOLDEN=1) before the RL layer was
 * made generic. A change to the loop, the environment interface or the
 * layout that changes what Search-R1 does fails here.
 *
 * Bit-exact floating point across machines: OpenBLAS picks its kernels by
 * CPU (an AVX-512 machine sums in another order than an AVX2 one, and the
 * losses differ in the 7th digit), so the test pins them to the kernels the
 * fixture was recorded with (OPENBLAS_CORETYPE=Haswell, ATen's AVX2 path),
 * which every x86-64 machine with AVX2 runs. The executors and their
 * engines inherit the setting from this process.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { REPO_ROOT } from "../kernel/bridge.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

const FIXTURE = path.join(REPO_ROOT, "test/fixtures/searchr1-golden.json");
const WRITE = process.env.HEARTH_WRITE_GOLDEN === "1";

/** Fields of a step's metrics that measure time (they differ run to run). */
const TIMES = /(_s|_util|_ms)$/;

/** A step's metrics without its times. */
function timeless(m: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(m).filter(([k]) => !TIMES.test(k)));
}

let cluster: TestCluster;
const home = mkdtempSync(path.join(os.tmpdir(), "hearth-golden-home-"));

/** The kernels the fixture was recorded with (see the header). */
export const PINNED_NUMERICS = { OPENBLAS_CORETYPE: "Haswell", ATEN_CPU_CAPABILITY: "avx2" };

before(async () => {
  process.env.HEARTH_HOME = home;
  const cpu = existsSync("/proc/cpuinfo") ? readFileSync("/proc/cpuinfo", "utf8") : "";
  assert.match(cpu, /\bavx2\b/, "the pinned kernels need a CPU with AVX2");
  Object.assign(process.env, PINNED_NUMERICS);
  cluster = await startCluster({ agents: [{ id: "g1", cpus: 4, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

test("a seeded run of the embedded default's recipe does exactly what it did before the layer was made generic", { timeout: 600_000 }, async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-golden-"));
  const run = await SearchR1Run.create({
    head: cluster.endpoint,
    name: "golden",
    out,
    seed: 5,
    // Hotter than the demo, so that a few steps train (groups whose samples all score alike are dropped).
    temperature: 2,
    evalSize: 24,
    evalEvery: 3,
    rollouts: 2,
    trainers: 2,
    rolloutResreq: "cpu=1",
    trainerResreq: "cpu=1",
    log: () => undefined,
  });
  try {
    const steps: Array<Record<string, unknown>> = [];
    for (let i = 0; i < 6; i++) steps.push(timeless({ ...(await run.step()).metrics }));
    const written = readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => timeless(JSON.parse(l) as Record<string, unknown>));
    assert.deepEqual(written, steps, "metrics.jsonl holds what the steps returned");
    const ev = await run.evaluate();
    const trainers = await run.trainerGang.broadcast("stateDigest", [[], []]);
    const digests = await run.digests();
    const got = {
      steps,
      eval: { em: ev.em, searchesPerSample: ev.callsPerSample, responses: ev.samples.map((s) => s.response) },
      trainers: trainers.map((t) => ({ rank: t.rank, weights: t.weights, moments: t.moments, steps: t.steps })),
      policy: digests.trainers[0]!.digest,
      rollouts: digests.rollouts.map((r) => r.digest),
    };
    assert.equal(new Set(got.rollouts).size, 1, "every rollout holds one policy");
    assert.equal(got.rollouts[0], got.policy, "the trainers' policy");
    if (WRITE || !existsSync(FIXTURE)) {
      writeFileSync(FIXTURE, `${JSON.stringify(got, null, 1)}\n`);
      if (!WRITE) assert.fail(`no ${FIXTURE} yet: written now; run the test again`);
      return;
    }
    const want = JSON.parse(readFileSync(FIXTURE, "utf8")) as typeof got;
    assert.deepEqual(got.steps, want.steps, "every step's metrics, but times");
    assert.deepEqual(got.eval, want.eval, "the held-out evaluation, answer by answer");
    assert.deepEqual(got.trainers, want.trainers, "every trainer rank's fp32 weights, AdamW moments and steps");
    assert.equal(got.policy, want.policy, "the published bf16 policy");
  } finally {
    await run.close();
  }
});
