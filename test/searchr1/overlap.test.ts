/**
 * Overlapped rollouts and training (`maxLag`) on real processes with the
 * tiny model: K = 0 (the default) is the synchronous loop exactly
 * (metrics.jsonl, trainer state and rollout weights equal an independent
 * synchronous loop written in the test from the services' own calls,
 * sharing no step code with the run); at K = 1 the rollouts run ahead
 * and the lag stays within K, also when a rollout executor is killed
 * mid-call and its call is retried; trajectories older than K versions are
 * dropped and counted. Plus the scheduler's launch rule on a fake launcher
 * and the option's validation.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { parseTrainFlags } from "../../sdk/rl/cli/train-cli.js";
import { BASE_OPTIONS, validateOptions } from "../../sdk/rl/run/options.js";
import { RolloutsAhead } from "../../sdk/rl/run/overlap.js";
import { stepItems } from "../../sdk/rl/run/pipeline.js";
import { buildSlices } from "../../sdk/rl/scoring/batch.js";
import type { Trajectory } from "../../sdk/rl/services/rollout-service.js";
import type { ObjectRef } from "../../sdk/cache/object-cache.js";
import { deriveSeed } from "../../sdk/tensor/seeds.js";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { type RunOptions, type StepMetrics } from "../../sdk/rl/run/run.js";
import { executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { lengthParity, smallRun } from "./small-run.js";

let cluster: TestCluster;
const home = mkdtempSync(path.join(os.tmpdir(), "hearth-overlap-home-"));

before(async () => {
  process.env.HEARTH_HOME = home; // the (4-step) warm start is made once and shared by the runs here
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

function options(name: string, extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return smallRun(cluster.endpoint, name, mkdtempSync(path.join(os.tmpdir(), `hearth-overlap-${name}-`)), extra);
}

/** metrics.jsonl without wall-clock times and their shares. */
function metricsOf(out: string): Array<Record<string, unknown>> {
  return readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => {
    const m = JSON.parse(l) as Record<string, unknown>;
    for (const k of Object.keys(m)) if (k.endsWith("_s") || k.endsWith("_util")) delete m[k];
    return m;
  });
}

async function finalState(run: SearchR1Run) {
  await run.evaluate(); // every rollout syncs to the last publication
  return { states: await run.trainerGang.broadcast("stateDigest", [[], []]), digests: await run.digests() };
}

test("K = 0 is the synchronous loop: metrics.jsonl, trainer state and rollout weights equal an independent synchronous loop, and a loop of the run's own parts (itemsOf, rollout, score, trainOn, publish)", async () => {
  // K = 0 is also the default: nothing to compare between a run given `maxLag: 0` and one given nothing, since
  // both get 0 (checked here on the options); what the run does at K = 0 is compared with the loop below.
  assert.equal(BASE_OPTIONS.maxLag, 0, "the generic default is K = 0");
  const o0 = options("k0-zero", { maxLag: 0 });
  const run0 = await SearchR1Run.create(o0);
  run0.setReward(lengthParity);
  let zero: { metrics: Array<Record<string, unknown>> } & Awaited<ReturnType<typeof finalState>>;
  try {
    for (let i = 0; i < 2; i++) assert.ok((await run0.step()).metrics.samples_trained > 0, "k0-zero: the step trained");
    zero = { metrics: metricsOf(o0.out!), ...(await finalState(run0)) };
  } finally {
    await run0.close();
  }
  for (const m of zero.metrics) {
    assert.equal(m.max_lag, 0);
    assert.equal(m.policy_lag_max, 0, `step ${m.step}: every trajectory was sampled with the trainers' current weights`);
    assert.equal(m.stale_dropped, 0);
  }
  assert.deepEqual(zero.metrics.map((m) => m.policy_version), [1, 2], "one publication per step");
  assert.equal(zero.digests.rollouts.length, 2);
  for (const r of zero.digests.rollouts) assert.equal(r.digest, zero.digests.trainers[0]!.digest, `rollout ${r.executorId} holds the trainers' policy`);

  // An independent synchronous reference: the loop written here from the services' own calls (rollout calls, the
  // trajectories read from the cache, rewards and group advantages from their definitions, the trainers' train calls),
  // in sequence, sharing no step code with the run (neither runStep nor the pipeline's rollouts/collect/update nor
  // RolloutsAhead). Shared are only the contracts both sides must keep: the step's seeded questions and sample seeds,
  // and the trainers' batch layout (buildSlices).
  const o = options("k0-reference");
  const run = await SearchR1Run.create(o);
  try {
    const ro = run.opts;
    assert.equal(ro.maxLag, 0, "a run given no maxLag is synchronous (the reference drives it by hand, so either way)");
    const reference: Array<Record<string, unknown>> = [];
    for (let step = 1; step <= 2; step++) {
      const questions = stepItems(ro, run.task, step);
      const chunks = Array.from({ length: Math.ceil(questions.length / ro.promptsPerTask) }, (_, i) => questions.slice(i * ro.promptsPerTask, (i + 1) * ro.promptsPerTask));
      const results = await Promise.all(
        chunks.map((q, i) =>
          run.rolloutPool.call("rollout", {
            setup: run.rolloutSetup,
            weights: `runs/${ro.name}/weights`,
            items: q.map((x, j) => ({ id: x.id, question: x.question, seed: deriveSeed(ro.seed, step, i * ro.promptsPerTask + j) })),
            groupSize: ro.groupSize,
            limits: { maxToolCalls: ro.maxToolCalls, maxTurnTokens: ro.maxTurnTokens, maxResponseTokens: ro.maxResponseTokens, temperature: ro.temperature, seed: step * 1000 + i },
          }),
        ),
      );
      const rows: Array<{ tokens: Int32Array; mask: Uint8Array; logprobs: Float32Array; advantage: number }> = [];
      let rewardSum = 0;
      let samples = 0;
      let tokens = 0;
      for (const [i, r] of results.entries()) {
        const trajectories = await run.app.objects.get<Trajectory[]>(r.trajectories);
        await run.app.objects.delete(r.trajectories.key);
        chunks[i]!.forEach((_question, g) => {
          const group = trajectories.filter((t) => t.group === g);
          const rewards = group.map((t) => lengthParity(t.response));
          rewardSum += rewards.reduce((x, y) => x + y, 0);
          samples += group.length;
          tokens += group.reduce((n, t) => n + t.tokens.length, 0);
          if (rewards.every((x) => x === rewards[0])) return; // no signal: not trained
          const mean = rewards.reduce((x, y) => x + y, 0) / rewards.length;
          const std = Math.sqrt(rewards.reduce((x, y) => x + (y - mean) ** 2, 0) / rewards.length);
          group.forEach((t, k) => rows.push({ tokens: t.tokens, mask: t.mask, logprobs: t.logprobs, advantage: (rewards[k]! - mean) / (std + 1e-6) }));
        });
      }
      const refs = await Promise.all(buildSlices(rows, ro.trainers).map((slice) => run.app.objects.put(slice, { scratch: true })));
      await run.trainerGang.broadcast("train", refs.map((ref) => [ref] as [ObjectRef]));
      for (const ref of refs) await run.app.objects.delete(ref.key);
      reference.push({ step, reward_mean: rewardSum / samples, samples_trained: rows.length, tokens });
    }
    assert.deepEqual(reference, zero.metrics.map((m) => ({ step: m.step, reward_mean: m.reward_mean, samples_trained: m.samples_trained, tokens: m.tokens })), "the same samples, rewards and batches");
    const s = await finalState(run);
    assert.deepEqual(s.states.map((x) => [x.weights, x.moments, x.steps]), zero.states.map((x) => [x.weights, x.moments, x.steps]), "and the same trainer state");
    for (const r of s.digests.rollouts) assert.equal(r.digest, zero.digests.trainers[0]!.digest, `reference rollout ${r.executorId} holds K = 0's policy`);
  } finally {
    await run.close();
  }

  // A loop of one's own from the run's public parts (what a notebook cell writes): the same items, samples, advantages,
  // updates and publications as the built-in step, so the same trainer state (fp32 weights, AdamW moments) and policy.
  const own = await SearchR1Run.create(options("k0-own-loop"));
  try {
    const trained: number[] = [];
    for (let step = 1; step <= 2; step++) {
      const items = own.itemsOf(step);
      assert.equal(items.length, own.opts.promptsPerStep, "a step's worth of items");
      const batch = await own.rollout(items, { step });
      const scored = await own.score(batch, lengthParity);
      const kept = scored.samples.filter((x) => x.kept);
      const res = await own.trainOn(kept);
      assert.deepEqual(res.map((r) => r.rank).sort(), [0, 1], "every trainer rank took the update");
      const pub = await own.publish();
      assert.equal(pub?.version, step + 1, "one publication per update (version 1 is the start's)");
      trained.push(kept.length);
    }
    assert.deepEqual(trained, zero.metrics.map((m) => m.samples_trained), "the same samples trained on per step");
    const s = await finalState(own);
    assert.deepEqual(s.states.map((x) => [x.rank, x.weights, x.moments, x.steps]), zero.states.map((x) => [x.rank, x.weights, x.moments, x.steps]), "the hand-written loop's trainer state is the built-in step's, on every rank");
    for (const r of s.digests.rollouts) assert.equal(r.digest, zero.digests.trainers[0]!.digest, `own-loop rollout ${r.executorId} holds K = 0's policy`);
    const status = await cluster.status({ keys: 1000 });
    const keys: string[] = status.apps.find((x: { name: string }) => x.name === own.opts.name)?.objects.keys ?? [];
    assert.ok(keys.includes(`runs/${own.opts.name}/weights`), "the status lists the run's keys");
    assert.deepEqual(keys.filter((k) => k.includes("/batches/")), [], "score deleted each batch's trajectories");
  } finally {
    await own.close();
  }
});

test("K = 1: rollouts run ahead, no trajectory lags more than 1 version, also with a rollout executor killed mid-call and its call retried", async () => {
  const o = options("k1-kill", { maxLag: 1 });
  const run = await SearchR1Run.create(o);
  run.setReward(lengthParity);
  try {
    const retriedBefore = (await cluster.status()).head.calls.retried as number;
    const seen: StepMetrics[] = [];
    for (let step = 1; step <= 4; step++) {
      const pending = run.step();
      if (step === 3) {
        // Kill a rollout executor while it runs a call (step 3's, or step 4's started ahead).
        const busy = await waitFor("a rollout call to be running", async () => executorsOf(await cluster.status(), o.name!, "rollout").find((e: any) => e.inflight === 1));
        process.kill(busy.pid, "SIGKILL");
      }
      const r = await pending;
      const m = r.metrics;
      seen.push(m);
      assert.equal(m.max_lag, 1);
      assert.ok(m.policy_lag_max! <= 1, `step ${step}: lag ${m.policy_lag_max} ≤ 1`);
      for (const s of r.samples) {
        const lag = m.policy_version! - s.policyVersion;
        assert.ok(lag >= 0 && lag <= 1, `step ${step}: a trajectory of policy version ${s.policyVersion} trained at version ${m.policy_version}`);
      }
      assert.equal(m.stale_dropped, 0, "the launch rule leaves nothing stale");
    }
    assert.ok((await cluster.status()).head.calls.retried > retriedBefore, "the killed executor's call was retried");
    assert.ok(seen.some((m) => m.policy_lag_max === 1), "some steps trained on rollouts sampled during the previous update");
    assert.deepEqual(seen.map((m) => m.policy_version), [1, 2, 3, 4]);
    const lines = metricsOf(o.out!);
    for (const k of ["policy_lag_max", "policy_lag_mean", "stale_dropped", "max_lag", "policy_version"]) assert.ok(lines.every((m) => typeof m[k] === "number"), `metrics.jsonl has ${k}`);
    const raw = readFileSync(path.join(o.out!, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as StepMetrics);
    for (const m of raw) {
      assert.ok(m.rollout_busy_s! > 0 && m.trainer_busy_s! > 0, "busy seconds of rollouts and trainers");
      assert.ok(m.rollout_util! > 0 && m.trainer_util! > 0 && m.trainer_util! <= 1, `utilisations (${m.rollout_util}, ${m.trainer_util})`);
    }
  } finally {
    await run.close();
  }
});

test("K = 1: trajectories older than K versions are dropped and counted (a rollout that skipped its weight syncs)", async () => {
  const o = options("k1-stale", { maxLag: 1, rollouts: 1 });
  const run = await SearchR1Run.create(o);
  run.setReward(lengthParity);
  try {
    // The only rollout executor keeps its weights (version 0: none yet) for steps 1-3's six calls.
    await run.rolloutPool.call("skipSyncs", 6);
    const seen: StepMetrics[] = [];
    for (let i = 0; i < 4; i++) seen.push((await run.step()).metrics);
    const perStep = 4 * 4;
    // Step 1 trains at version 1 (lag 1: kept); steps 2 and 3 at version 2 (lag 2: dropped, so no update);
    // step 4's calls, started ahead during step 3, synced to version 2 (lag 0).
    assert.deepEqual(seen.map((m) => m.stale_dropped), [0, perStep, perStep, 0]);
    assert.deepEqual(seen.map((m) => m.policy_version), [1, 2, 2, 2]);
    assert.deepEqual(seen.map((m) => m.samples_trained > 0), [true, false, false, true]);
    assert.deepEqual(seen.map((m) => m.policy_lag_max), [1, 0, 0, 0], "what was trained on lagged at most 1");
  } finally {
    await run.close();
  }
});

test("the launch rule: step t's rollouts start once step t − K − 1 has published, in step order, up to the horizon", async () => {
  const launched: number[] = [];
  const ahead = new RolloutsAhead<number>(async (t) => (launched.push(t), t), 2);
  assert.equal(await ahead.take(1), 1);
  ahead.prefetch(1);
  assert.deepEqual(launched, [1, 2, 3], "at step 1, steps 2 and 3 start");
  assert.equal(await ahead.take(2), 2);
  ahead.prefetch(2);
  assert.deepEqual(launched, [1, 2, 3, 4], "step 3 is not started twice");
  ahead.horizon = 4;
  assert.equal(await ahead.take(3), 3);
  ahead.prefetch(3);
  assert.deepEqual(launched, [1, 2, 3, 4], "nothing past the horizon");
  ahead.maxLag = 0;
  assert.equal(await ahead.take(4), 4);
  ahead.prefetch(4);
  assert.equal(await ahead.take(5), 5);
  assert.deepEqual(launched, [1, 2, 3, 4, 5], "K = 0: a step's rollouts start when it is taken");
  assert.deepEqual(ahead.ahead, []);
  assert.throws(() => (ahead.maxLag = -1), /--max-lag must be a whole number ≥ 0; got -1/);
});

test("--max-lag is parsed and checked before any service starts", () => {
  assert.equal(parseTrainFlags(["--max-lag", "2"]).maxLag, 2);
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-overlap-opts-"));
  assert.throws(() => validateOptions({ ...BASE_OPTIONS, out, maxLag: 1.5 }), /--max-lag must be a whole number ≥ 0; got 1\.5/);
  assert.throws(() => validateOptions({ ...BASE_OPTIONS, out, maxLag: -1 }), /--max-lag must be a whole number ≥ 0; got -1/);
  validateOptions({ ...BASE_OPTIONS, out, maxLag: 3 });
});
