/**
 * Search-R1 on a real Slurm across three hosts (network namespaces, munge
 * and hearth authentication on): one rollout job on each of two hosts, the
 * trainer gang's job on the third. Mid-step, with a rollout call running on
 * one rollout host, that host's link is cut: its agent is lost, the call
 * runs again on the other rollout host, the step completes whole, the run
 * goes on, and the trainers took exactly one update per step that trained
 * (nothing trained twice); every rollout that answers afterwards holds the
 * trainers' policy, metrics.jsonl has steps 1..n once, and the trainers'
 * state, the policy and every step's metrics equal a run of the same seed
 * whose link was never cut.
 *
 * Skips, saying why, only where namespaces cannot be made.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { type RunOptions, type StepMetrics } from "../../sdk/rl/run/run.js";
import { netnsSupport } from "./netns.js";
import { agentNodes, eventually, retriedCalls, startWorld, type SlurmWorld } from "./setup.js";

const support = netnsSupport();
const skip = support.ok ? false : `network namespaces unavailable: ${support.reason}`;

// 2 CPUs per host: a rollout of cpu=2 fills a host, so the two rollouts take two hosts and the gang (2 × cpu=1) the third.
const NODES = [
  { name: "n1", cpus: 2, memMiB: 3000, gpus: 0 },
  { name: "n2", cpus: 2, memMiB: 3000, gpus: 0 },
  { name: "n3", cpus: 2, memMiB: 3000, gpus: 0 },
];

let world: SlurmWorld;
let out: string;

before(async () => {
  if (skip) return;
  world = await startWorld({ netns: true, nodes: NODES, munge: true });
  out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-link-"));
});

after(async () => {
  await world?.stop();
  if (out) rmSync(out, { recursive: true, force: true });
});



/** The run's options on this world's Slurm. */
function options(extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return {
    name: "sr1-link",
    engine: "slurm",
    bind: world.bind,
    connectOptions: { local: { home: world.home }, slurm: { env: world.env, pollMs: 250, agentTimeoutMs: 2000 } },
    out,
    promptsPerStep: 16,
    promptsPerTask: 8,
    groupSize: 8,
    evalSize: 16,
    seed: 3,
    evalEvery: 0,
    rollouts: 2,
    trainers: 2,
    rolloutResreq: "cpu=2",
    trainerResreq: "cpu=1",
    threads: 1,
    log: () => undefined,
    ...extra,
  };
}

/** A step's deterministic metrics. */
function sameMetrics(m: StepMetrics): unknown {
  return { step: m.step, reward: m.reward_mean, loss: m.loss, kl: m.kl, trained: m.samples_trained, kept: m.groups_kept, policy: m.policy_version };
}

test("a rollout host's link cut mid-step: its call runs again on the other rollout host, the step completes whole, the run goes on, nothing is trained twice, and it ends as a run never cut", { skip }, async () => {
  const sr = await SearchR1Run.create(options());
  let cutRun: { steps: number; states: unknown; policy: string; metrics: unknown[] } = { steps: 0, states: null, policy: "", metrics: [] };
  const net = world.net!;
  let cut: string | undefined;
  try {
    const st = await sr.app.status();
    const services = st.apps[0]!.services;
    const rollout = services.find((s) => s.name === "rollout")!;
    const trainer = services.find((s) => s.name === "trainer")!;
    const gangJob = st.slurm!.jobs.find((j) => j.serviceId === trainer.id)!;
    const rolloutHosts = st.slurm!.jobs.filter((j) => j.serviceId === rollout.id).map((j) => j.where).sort();
    assert.equal(rolloutHosts.length, 2);
    assert.equal(new Set([...rolloutHosts, gangJob.where]).size, 3, `each rollout on a host of its own, the gang on the third (rollouts ${rolloutHosts.join(", ")}, gang ${gangJob.where})`);

    await sr.step();
    const optimizerSteps = async (): Promise<number> => (await sr.trainerGang.broadcast("stateDigest", [[], []]))[0]!.steps;
    const before = await optimizerSteps();
    const retriedBefore = retriedCalls(await sr.app.status());

    // Cut a rollout host while its executor runs one of the step's rollout calls.
    const victim = rolloutHosts[1]!;
    const stepping = sr.step();
    stepping.catch(() => undefined);
    await eventually(`a rollout call running on ${victim}`, async () => {
      const s = await sr.app.status();
      const nodes = await agentNodes(world, s);
      const ex = s.apps[0]!.services.find((x) => x.name === "rollout")!.executors;
      return ex.some((e) => e.inflight > 0 && nodes.get(e.agent) === victim) ? true : undefined;
    }, 60_000);
    net.cut(victim);
    cut = victim;
    const t0 = Date.now();
    const m = (await stepping).metrics;
    const stepMs = Date.now() - t0;
    assert.equal(m.groups_kept + m.groups_dropped, 16, "every prompt's group came back: the step is whole");
    const afterCut = await sr.app.status();
    assert.ok(retriedCalls(afterCut) - retriedBefore >= 1, "the cut host's call ran again");
    assert.equal(sr.app.duplicateReplies, 0, "and was answered once");

    // The run goes on without the cut host.
    const trained = (): number => sr.history.slice(1).filter((x) => x.samples_trained > 0).length;
    while (sr.stepsDone < 4 || (trained() < 2 && sr.stepsDone < 10)) await sr.step();
    const trainedSteps = trained();
    assert.ok(trainedSteps >= 1, "a step trained after the cut");
    assert.equal((await optimizerSteps()) - before, trainedSteps, "one optimizer step per step that trained: nothing trained twice");
    // Every rollout that answers after the cut holds the trainers' weights, not only the ranks.
    await sr.syncRollouts();
    const d = await sr.digests();
    assert.equal(d.trainers[1]!.digest, d.trainers[0]!.digest, "the ranks agree");
    assert.ok(d.rollouts.length >= 1, "a rollout executor answers after the cut");
    for (const r of d.rollouts) assert.equal(r.digest, d.trainers[0]!.digest, `rollout ${r.executorId} holds the trainers' policy after the cut`);
    const steps = readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => (JSON.parse(l) as StepMetrics).step);
    assert.deepEqual(steps, Array.from({ length: sr.stepsDone }, (_, i) => i + 1), "metrics.jsonl: steps 1..n, no gap, no repeat");
    cutRun = { steps: sr.stepsDone, states: await sr.trainerGang.broadcast("stateDigest", [[], []]), policy: d.trainers[0]!.digest, metrics: sr.history.map(sameMetrics) };
    console.log(`# slurm search-r1: ${victim}'s link cut mid-step; the step completed ${stepMs} ms later with its call retried on ${rolloutHosts[0]}; ${sr.stepsDone} steps, ${trainedSteps} trained after the first`);
  } finally {
    if (cut) net.restore(cut);
    await sr.close();
  }

  // The same seed, never cut: after as many steps, the same trainer state, policy and metrics (the retried call
  // sampled the same tokens). One rollout executor: where a call runs does not change what it samples, and the
  // cut host's node may still be down for Slurm.
  const ref = await SearchR1Run.create(options({ name: "sr1-uncut", out: path.join(out, "uncut"), rollouts: 1 }));
  try {
    while (ref.stepsDone < cutRun.steps) await ref.step();
    assert.deepEqual(await ref.trainerGang.broadcast("stateDigest", [[], []]), cutRun.states, `after step ${cutRun.steps}: both ranks' weights, moments and steps as a run never cut`);
    await ref.syncRollouts();
    const d = await ref.digests();
    for (const x of [...d.trainers, ...d.rollouts]) assert.equal(x.digest, cutRun.policy, "the same policy");
    assert.deepEqual(ref.history.map(sameMetrics), cutRun.metrics, "and every step's metrics");
  } finally {
    await ref.close();
  }
});
