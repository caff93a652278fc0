/**
 * A trainer gang lost mid-run, on real processes: with `snapshotEvery: 1`
 * the run declares the gang again, restores the new ranks from the snapshot
 * of its last completed step and runs the step again; afterwards every
 * rank's exact state (fp32 weights, AdamW moments, steps), every rollout's
 * policy and every step's metrics equal a run that never lost its trainers
 * (and that took no snapshots). A snapshot from before the trainers' last
 * update cannot restore exactly: the step fails saying which updates would
 * be lost.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { GangFailedError } from "../../sdk/errors/index.js";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { type RunOptions, type StepMetrics } from "../../sdk/rl/run/run.js";
import { readSnapshot } from "../../sdk/rl/state/snapshot.js";
import { executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { lengthParity, smallRun } from "./small-run.js";

const work = mkdtempSync(path.join(os.tmpdir(), "hearth-gang-restore-"));
let cluster: TestCluster;

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 3, mem: "8g" }] });
});
after(async () => {
  await cluster?.stop();
});

async function open(name: string, extra: Partial<RunOptions> = {}): Promise<{ run: SearchR1Run; log: string[] }> {
  const log: string[] = [];
  const run = await SearchR1Run.create(smallRun(cluster.endpoint, name, mkdtempSync(path.join(work, `${name}-`)), { log: (l) => log.push(l), ...extra }));
  run.setReward(lengthParity);
  return { run, log };
}

/** Every rank's exact state, and the policy every rollout holds (checked equal to rank 0's). */
async function stateOf(run: SearchR1Run): Promise<unknown> {
  const states = await run.trainerGang.broadcast("stateDigest", [[], []]);
  await run.syncRollouts();
  const d = await run.digests();
  const policy = d.trainers[0]!.digest;
  for (const t of d.trainers) assert.equal(t.digest, policy, `rank ${t.rank} holds rank 0's policy`);
  assert.equal(d.rollouts.length, 2);
  for (const r of d.rollouts) assert.equal(r.digest, policy, `rollout ${r.executorId} holds the trainers' policy`);
  return { states: [...states].sort((a, b) => a.rank - b.rank), policy };
}

/** A step's deterministic metrics. Its weights object's cache version is not one: the restored gang's base is one more write of that object. */
function same(m: StepMetrics): unknown {
  return { step: m.step, reward: m.reward_mean, em: m.em, loss: m.loss, kl: m.kl, trained: m.samples_trained, policy: m.policy_version };
}

/** SIGKILLs trainer rank `rank`'s executor and waits for the head to fail the gang. */
async function killRank(app: string, run: SearchR1Run, rank: number): Promise<string> {
  const member = run.trainerGang.members.find((m) => m.rank === rank)!;
  const e = (executorsOf(await cluster.status(), app, "trainer") as Array<{ id: string; pid: number }>).find((x) => x.id === member.executorId)!;
  process.kill(e.pid, "SIGKILL");
  await waitFor("the gang to fail", async () => {
    const s = ((await cluster.status()).apps as Array<{ name: string; services: Array<{ name: string; state: string; id: string }> }>).find((a) => a.name === app)!.services.find((x) => x.name === "trainer");
    return s?.state === "failed" ? true : undefined;
  });
  return member.executorId;
}

test("a lost trainer rank: the gang is declared again, restored from the last step's snapshot, and the run goes on exactly as one that never lost it", async () => {
  const steps = 3;
  const { run: steady } = await open("steady");
  let expected: unknown;
  let history: unknown[];
  try {
    for (let i = 0; i < steps; i++) assert.ok((await steady.step()).metrics.samples_trained > 0, "every step trains");
    expected = await stateOf(steady);
    history = steady.history.map(same);
  } finally {
    await steady.close();
  }

  const { run, log } = await open("restored", { snapshotEvery: 1 });
  try {
    await run.step();
    await run.step();
    assert.equal((await readSnapshot(run.app, "restored"))?.step, 2, "a snapshot of every step");
    const before = run.trainerGang.members.map((m) => m.executorId);
    const lost = await killRank("restored", run, 1);
    const third = await run.step();
    assert.equal(third.metrics.step, 3);
    assert.ok(log.some((l) => l.startsWith("the trainer gang lost rank 1") && l.includes("restoring it from the snapshot of step 2 (policy version 3)")), log.join("\n"));
    const now = run.trainerGang.members.map((m) => m.executorId);
    assert.ok(!now.includes(lost) && now.every((id) => !before.includes(id)), "a new gang");
    assert.deepEqual(await stateOf(run), expected, "after step 3: every rank's weights, moments and steps, and every rollout's policy, as the run that never lost a rank");
    assert.deepEqual(run.history.map(same), history, "and every step's metrics");
    assert.equal((await readSnapshot(run.app, "restored"))?.step, 3);
  } finally {
    await run.close();
  }

  // A snapshot older than the last completed step would lose steps: the run says so and trains nothing.
  const { run: gap } = await open("gap", { snapshotEvery: 2 });
  try {
    await gap.step();
    await killRank("gap", gap, 0);
    await assert.rejects(gap.step(), (e: Error) => {
      assert.match(e.message, /the trainer gang lost rank 0 .*last snapshot is of step 0 \(policy version 1, 0 updates\), and its trainers updated since \(version 2, 1 updates at step 1\): the updates after step 0 would be lost/);
      assert.ok(e.cause instanceof GangFailedError);
      return true;
    });
    assert.equal(gap.stepsDone, 1);
  } finally {
    await gap.close();
  }
});
