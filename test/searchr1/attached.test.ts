/**
 * A detached run survives its loop's executor, and a notebook drives it, on
 * real processes (a head, an agent running each app's executors as its own
 * user, the loop, rollout and trainer executors):
 *
 * - The loop's executor is killed with SIGKILL while a step's rollouts are
 *   in flight: the pool starts another, which takes the run over from its
 *   last completed step. The run's history has every step once, and at the
 *   same step its state equals an uninterrupted run's, on every trainer rank
 *   (fp32 weights, AdamW moments, steps) and every rollout (bf16 policy).
 * - Killed while its trainers are updating, the update the loop never
 *   recorded cannot be redone exactly: the run fails, naming what was lost.
 * - `SearchR1Run.attach(name)`: the history, `pause()`, `step()` exactly
 *   once while paused, `trajectories()`, a local `rescore`, `setReward` of
 *   a module taking effect at the next step (a bad module is a clear error
 *   and changes nothing), `follow()` with a progress bar, `stop()`.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { detachRun } from "../../sdk/rl/cluster/detached.js";
import type { LoopStatus } from "../../sdk/rl/state/run-log.js";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { searchR1 } from "../../sdk/envs/searchr1/package.js";
import type { AttachedRun } from "../../sdk/rl/notebook/attached.js";
import type { StepMetrics } from "../../sdk/rl/run/pipeline.js";
import { CLI, executorsOf, startCluster, startHeadWithData, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { smallRun } from "./small-run.js";

const work = mkdtempSync(path.join(os.tmpdir(), "hearth-attached-"));
let cluster: TestCluster;
const parity = path.join(work, "rewards", "parity.mjs");

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  // The run's executors run as its app's own user: the reward modules are where others can read them.
  chmodSync(work, 0o711);
  mkdirSync(path.dirname(parity), { mode: 0o755 });
  writeFileSync(parity, "export function lengthParity(response) { return response.length % 2 === 0 ? 1 : 0; }\nexport const notAFunction = 3;\nexport function half() { return 0.5; }\n");
  // Two runs side by side: each has 2 rollouts and 2 trainers at cpu=0.5, and its loop.
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 5, mem: "12g" }] });
});
after(async () => {
  await cluster?.stop();
});

// The end-to-end tests' small run (small-run.ts): a hot sampler, so that with a reward that varies within groups every step trains.
const small = { ...smallRun("", "", ""), head: undefined, name: undefined, out: undefined, log: undefined, maxLag: 0, steps: 500 };

/** Starts run `name` detached and attaches; paused before its first step, it takes the length-parity reward (exact match would train on nothing), then goes. */
async function startRun(name: string, head = cluster.endpoint): Promise<AttachedRun> {
  await detachRun({ ...small, name }, searchR1, { head });
  const run = await SearchR1Run.attach(name, { head });
  const held = await run.pause();
  assert.deepEqual([held.state, held.step], ["paused", 0], "paused before its first step");
  await run.setReward({ module: parity, export: "lengthParity" });
  return run;
}

/** Calls in flight on each executor of a service, from the head's status. */
async function inflight(app: string, service: string, status = () => cluster.status()): Promise<number[]> {
  return executorsOf(await status(), app, service).map((e: { inflight: number }) => e.inflight);
}

async function loopExecutor(app: string, status = () => cluster.status()): Promise<{ id: string; pid: number }> {
  const [e] = executorsOf(await status(), app, "loop") as Array<{ id: string; pid: number; state: string }>;
  assert.ok(e, `${app} has a loop executor`);
  return e;
}

/** Deterministic fields of a step (its time is not). */
function same(m: StepMetrics): unknown {
  return { step: m.step, reward: m.reward_mean, em: m.em, searches: m.searches_per_sample, loss: m.loss, kl: m.kl, version: m.weights_version };
}

/** Every rollout holds the trainers' policy; returns the trainers' exact state and that policy. */
function stateOf(d: Awaited<ReturnType<AttachedRun["digests"]>>): unknown {
  const policy = d.policy.trainers[0]!.digest;
  for (const t of d.policy.trainers) assert.equal(t.digest, policy, `trainer rank ${t.rank} holds rank 0's policy`);
  assert.equal(d.policy.rollouts.length, 2);
  for (const r of d.policy.rollouts) assert.equal(r.digest, policy, `rollout ${r.executorId} holds the trainers' policy`);
  assert.equal(d.trainers.length, 2);
  return { trainers: [...d.trainers].sort((a, b) => a.rank - b.rank), policy };
}

test("the loop's executor killed mid-step: another takes the run over and its state equals an uninterrupted run's; a notebook pauses, steps, swaps the reward and stops it", async () => {
  const victim = await startRun("victim");
  await victim.resume();
  const first = await loopExecutor("victim");
  await waitFor("victim at step 2", async () => ((await victim.status()).step >= 2 ? true : undefined), 300_000);

  // Kill the loop while a step's rollouts run (its trainers idle): nothing of that step is recorded yet.
  await waitFor("rollouts in flight, trainers idle", async () => {
    const [r, t] = [await inflight("victim", "rollout"), await inflight("victim", "trainer")];
    return r.some((n) => n > 0) && t.every((n) => n === 0) ? true : undefined;
  }, 60_000);
  process.kill(first.pid, "SIGKILL");

  try {
    const taken = await waitFor("another loop executor to take the run over", async () => {
      const s = await victim.status();
      return s.takeovers?.length === 1 && s.state === "running" ? s : undefined;
    }, 120_000);
    assert.notEqual(taken.where.executorId, first.id);
    assert.equal(taken.takeovers![0]!.lost.split(" ")[0], first.id);
    const killedAt = taken.takeovers![0]!.step;
    await waitFor("two steps past the kill", async () => ((await victim.status()).step >= killedAt + 2 ? true : undefined), 120_000);
    const held = await victim.pause();
    assert.equal(held.state, "paused");
    const p = held.step;
    assert.deepEqual(victim.history.map((m) => m.step), Array.from({ length: p }, (_, i) => i + 1), "every step once, in order, across the takeover");
    assert.ok(victim.history.every((m) => m.samples_trained > 0), "every step trained (so the states compared moved)");
    const victimState = stateOf(await victim.digests());

    // The same run, never interrupted: paused before its first step, then stepped one at a time to the same step.
    const steady = await startRun("steady");
    try {
      for (let s = 1; s <= p; s++) {
        const m = await steady.step();
        assert.equal(m.step, s, "step() runs exactly the next step");
      }
      assert.equal((await steady.status()).state, "paused", "and the run stays paused");
      assert.deepEqual(stateOf(await steady.digests()), victimState, `at step ${p}: every rank's weights, moments and steps, and every rollout's policy, as the run whose loop was killed`);
      assert.deepEqual(steady.history.map(same), victim.history.map(same), "every step's metrics as the interrupted run's, the redone step included");

      // The notebook surface, on the paused run.
      const table = await steady.trajectories();
      assert.equal(table.rows().length, small.promptsPerStep! * small.groupSize!);
      const before = await steady.samples(p);
      const view = await steady.rescore(p, () => 1);
      assert.ok(view.after.every((s) => s.reward === 1), "rescored here with the new function");
      assert.deepEqual((await steady.samples(p)).samples.map((s) => s.reward), before.samples.map((s) => s.reward), "a rescore is local: the run's samples are untouched");

      // The run's executors run as its app's own user: a module in a private folder is refused, saying why.
      const hidden = mkdtempSync(path.join(work, "private-"));
      writeFileSync(path.join(hidden, "half.mjs"), "export function half() { return 0.5; }\n");
      await assert.rejects(steady.setReward({ module: path.join(hidden, "half.mjs"), export: "half" }), /cannot read .*half\.mjs as this executor's user/);
      await assert.rejects(steady.setReward({ module: parity, export: "notAFunction" }), /has no exported function 'notAFunction'/);
      await assert.rejects(steady.setReward({ module: path.join(work, "rewards", "missing.mjs"), export: "half" }), /cannot be loaded where the run's loop runs/);
      const unchanged = await steady.step();
      const scored = (await steady.samples(unchanged.step)).samples;
      assert.deepEqual(scored.map((x) => x.reward), scored.map((x) => (x.response.length % 2 === 0 ? 1 : 0)), "refused modules leave the reward as it was");
      const swapped = await steady.setReward({ module: parity, export: "half" });
      assert.equal(swapped.reward?.export, "half");
      const m = await steady.step();
      assert.equal(m.reward_mean, 0.5, "the next step scores with the module's function");

      // Follow: a progress bar until the run holds again (or its end).
      await steady.resume();
      const ctl = new AbortController();
      const seen: number[] = [];
      const followed = await steady.follow({ signal: ctl.signal, onEvent: (e) => e.type === "step" && (seen.push(e.step), ctl.abort()) });
      assert.ok(seen.length >= 1 && seen[0] === m.step + 1, `follow saw the next step (${seen.join(",")})`);
      assert.equal(followed.state, "running", "aborting follow leaves the run going");
      const end = await steady.stop();
      assert.equal(end.state, "done", end.why);
      await assert.rejects(steady.pause(), /is done/);
    } finally {
      await steady.detach();
    }

    // Killed while its trainers update: the loop that takes over finds an update it never recorded and says so.
    // The trainers' processes are held (SIGSTOP) while the rollouts run, so the update is sent and pending when the loop dies.
    await victim.resume();
    const second = await loopExecutor("victim");
    await waitFor("rollouts in flight, trainers idle", async () => {
      const [r, t] = [await inflight("victim", "rollout"), await inflight("victim", "trainer")];
      return r.some((n) => n > 0) && t.every((n) => n === 0) ? true : undefined;
    }, 60_000);
    const trainers = executorsOf(await cluster.status(), "victim", "trainer") as Array<{ pid: number }>;
    for (const t of trainers) process.kill(t.pid, "SIGSTOP");
    try {
      await waitFor("the update sent to the trainers", async () => {
        const t = await inflight("victim", "trainer");
        return t.every((n) => n > 0) ? true : undefined;
      }, 20_000);
      process.kill(second.pid, "SIGKILL");
    } finally {
      for (const t of trainers) process.kill(t.pid, "SIGCONT");
    }
    const failed: LoopStatus = await waitFor("the run to fail", async () => {
      const s = await victim.status();
      return s.state === "failed" ? s : undefined;
    }, 120_000);
    assert.match(failed.why ?? "", /cannot go on exactly: its trainers hold policy version \d+ after \d+ updates, but the run recorded version \d+ after \d+ at step \d+.*metrics and trajectories are lost/);
  } finally {
    await victim.detach();
  }
});


test("a head restart under a detached run: its loop executor is adopted, renews its connection, runs the step again, and the run's state equals an uninterrupted run's", async () => {
  const dataDir = mkdtempSync(path.join(work, "data-"));
  const first = startHeadWithData("tcp://127.0.0.1:0", dataDir);
  const endpoint = await first.endpoint;
  const agent = spawn(process.execPath, [CLI, "agent", "--head", endpoint, "--id", "r1", "--cpus", "5", "--mem", "12g", "--gpus", "0", "--work-dir", mkdtempSync(path.join(work, "agent-"))], { stdio: "ignore" });
  let second: ReturnType<typeof startHeadWithData> | undefined;
  const status = async (): Promise<any> => {
    const { client } = await HeadClient.open(endpoint, { app: "_hearth-status" }, { timeoutMs: 5000, admin: true });
    try {
      return await client.control("status", { all: true });
    } finally {
      client.close();
    }
  };
  try {
    await waitFor("the agent to register", async () => ((await status()).agents.length === 1 ? true : undefined));
    const run = await startRun("through", endpoint);
    await run.resume();
    await waitFor("step 2", async () => ((await run.status()).step >= 2 ? true : undefined), 120_000);
    const loop = await loopExecutor("through", status);
    await waitFor("rollouts in flight, trainers idle", async () => {
      const [r, t] = [await inflight("through", "rollout", status), await inflight("through", "trainer", status)];
      return r.some((n) => n > 0) && t.every((n) => n === 0) ? true : undefined;
    }, 60_000);
    first.proc.kill("SIGKILL");
    await waitForExit("the first head", first.proc.pid!, 5000);
    await run.detach().catch(() => undefined); // its connection was to the old head
    second = startHeadWithData(endpoint, dataDir);
    assert.equal(await second.endpoint, endpoint);

    const again = await SearchR1Run.attach("through", { head: endpoint });
    try {
      const at = (await again.status()).step;
      await waitFor("two steps after the restart", async () => ((await again.status()).step >= at + 2 ? true : undefined), 120_000);
      const held = await again.pause();
      assert.equal(held.state, "paused", held.why);
      assert.equal(held.where.executorId, loop.id, "the same loop executor, adopted by the new head");
      assert.equal(held.takeovers, undefined, "no loop was lost");
      assert.ok(again.events.some((e) => e.type === "log" && /^the head restarted during step \d+: reconnecting/.test(e.text)), "the loop renewed its connection");
      assert.deepEqual(again.history.map((m) => m.step), Array.from({ length: held.step }, (_, i) => i + 1), "every step once, in order, across the restart");
      assert.ok(again.history.every((m) => m.samples_trained > 0), "every step trained");
      const through = stateOf(await again.digests());

      const steady = await startRun("steady-2", endpoint);
      try {
        for (let s = 1; s <= held.step; s++) assert.equal((await steady.step()).step, s);
        assert.deepEqual(stateOf(await steady.digests()), through, `at step ${held.step}: every rank's exact state and every rollout's policy as the run that lived through the restart`);
        assert.deepEqual(steady.history.map(same), again.history.map(same));
      } finally {
        await steady.stop().catch(() => undefined);
        await steady.detach();
      }
      assert.equal((await again.stop()).state, "done");
    } finally {
      await again.detach();
    }
  } finally {
    first.proc.kill("SIGKILL");
    second?.proc.kill("SIGTERM");
    agent.kill("SIGTERM");
    await waitForExit("the agent", agent.pid!, 15_000).catch(() => agent.kill("SIGKILL"));
    if (second) await waitForExit("the second head", second.proc.pid!, 15_000).catch(() => second!.proc.kill("SIGKILL"));
  }
});
