/**
 * Every object a run makes has an owner and an end (real head, agent,
 * executors and tiny model; objects counted and listed through the head's
 * status with the admin credential): after 30 steps with keepSteps 5 and an
 * evaluation every 10, the head holds exactly the trajectories of the last 5
 * steps plus what the run documents (weights, run state, rollout setup,
 * corpus); the agent's node cache holds only what its executors still read
 * (the slices and setups the head deleted are gone from it); a rescore of a
 * step outside the window is a clear error naming the window; a closed run,
 * also one with rollouts started ahead (maxLag 1), leaves only what it
 * documents, and the node cache drops its copies; a new run of the name
 * replaces those; an app released by its keep-alive loses its scratch
 * objects (a driver that vanished mid-step).
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { HearthError } from "../../sdk/errors/index.js";
import { SearchR1Run, type RunOptions } from "../../sdk/envs/searchr1/index.js";
import { readRunState, runStateKey, type RunState } from "../../sdk/rl/state/run-state.js";
import { startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { lengthParity, smallRun } from "./small-run.js";

let cluster: TestCluster;
const home = mkdtempSync(path.join(os.tmpdir(), "hearth-lifetimes-home-"));

before(async () => {
  process.env.HEARTH_HOME = home; // the 4-step warm start is made once and shared by the runs here
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

function options(name: string, extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return smallRun(cluster.endpoint, name, mkdtempSync(path.join(os.tmpdir(), `hearth-lifetimes-${name}-`)), extra);
}

/** The object keys app `name` holds in the head, from its status (sorted), and the head's total count. */
async function heldKeys(name: string): Promise<{ keys: string[]; count: number; total: number }> {
  const status = await cluster.status({ keys: 1000 });
  const app = status.apps.find((a: any) => a.name === name);
  assert.ok(app, `app ${name} is in the status`);
  assert.equal(app.objects.keysLeftOut, undefined, "every key is listed");
  return { keys: app.objects.keys, count: app.objects.objects, total: status.objects.objects };
}

/** The node cache's object count, once its heartbeat reports `want` (or the last report after 10 s). */
async function nodeCacheObjects(want: number): Promise<number> {
  let last = -1;
  await waitFor(
    `the node cache to hold ${want} object(s)`,
    async () => {
      last = (await cluster.status()).agents.find((a: any) => a.id === "n1")?.cache?.objects ?? -1;
      return last === want ? true : undefined;
    },
    10_000,
  ).catch(() => undefined);
  return last;
}

const documented = (name: string): string[] => ["env/corpus", "rollout-setup", "run", "weights"].map((k) => `runs/${name}/${k}`);

test("30 steps with keepSteps 5: the head holds the last 5 steps' trajectories and what the run documents, nothing else; the node cache frees what the head freed", async () => {
  const name = "lifetimes";
  const run = await SearchR1Run.create(options(name, { keepSteps: 5, evalEvery: 10 }));
  run.setReward(lengthParity);
  try {
    let trained = 0;
    for (let i = 0; i < 30; i++) trained += (await run.step()).metrics.samples_trained > 0 ? 1 : 0;
    assert.ok(trained >= 25, `most steps trained, so they made training slices (${trained} of 30)`);
    assert.equal(run.history.filter((m) => m.eval_em !== undefined).length, 3, "three evaluations ran");

    const { keys, count, total } = await heldKeys(name);
    const steps = keys.filter((k) => k.startsWith(`runs/${name}/steps/`));
    const others = keys.filter((k) => !steps.includes(k));
    assert.deepEqual(others, documented(name), "besides the steps: weights, run state, rollout setup and corpus (no slices, setups, evaluations or warm-start batches)");
    const byStep = new Map<number, string[]>();
    for (const k of steps) {
      const m = /^runs\/lifetimes\/steps\/(\d+)\/traj-[0-9a-f-]{36}$/.exec(k);
      assert.ok(m, `${k} is a step's trajectories object`);
      byStep.set(Number(m[1]), [...(byStep.get(Number(m[1])) ?? []), k]);
    }
    assert.deepEqual([...byStep.keys()].sort((a, b) => a - b), [26, 27, 28, 29, 30], "only the steps in the window");
    for (const [step, ks] of byStep) assert.equal(ks.length, 2, `step ${step}: one object per rollout call (4 prompts, 2 a call)`);
    assert.equal(count, 4 + 5 * 2);
    assert.equal(total, count, "and the head holds nothing of anyone else's");
    assert.deepEqual(run.result(26).trajectories.map((r) => r.key).sort(), byStep.get(26)!.sort(), "the held result names those objects");
    // The run state grows by a patch a step (not a rewrite); another driver of the app folds it back whole.
    const reader = await connect({ name, head: cluster.endpoint });
    try {
      const state = await readRunState(reader, name);
      assert.equal(state?.step, 30);
      assert.deepEqual(state?.history.map((m) => m.step), Array.from({ length: 30 }, (_, i) => i + 1));
      let patches = -1;
      const base = await reader.objects.get<RunState>(runStateKey(name), { fold: (acc, p) => ((patches = p.length), acc) });
      assert.equal(base.history.length, 0, "the base was written before the first step…");
      assert.equal(patches, 30, "…and each step appended one patch");
    } finally {
      await reader.disconnect();
    }

    // The rollouts read the setup, the corpus and the weights through the node cache; the trainers' setups and slices were deleted.
    assert.equal(await nodeCacheObjects(3), 3, "the node cache holds the rollout setup, the corpus and the weights");
    // What a soak reads: every Node process's memory, V8's heap apart (the head's own, and the agent's and executors' from their heartbeats).
    const st = await cluster.status();
    const executors = st.apps.find((a: any) => a.name === name).services.flatMap((s: any) => s.executors);
    for (const [what, m] of [["head", st.head.memory], ["agent", st.agents[0].memory], ...executors.map((e: any) => [e.id, e.memory])]) {
      assert.ok(m && m.rss > m.heapTotal && m.heapTotal >= m.heapUsed && m.heapUsed > 0 && m.external >= 0, `${what} reports its memory: ${JSON.stringify(m)}`);
    }

    assert.throws(
      () => run.rescore(25, lengthParity),
      (e: Error) => e instanceof HearthError && /step 25 is not held: this run keeps the last 5 step results \(--keep-steps 5; held: steps 26–30\); it left the inspection window/.test(e.message),
    );
    assert.throws(() => run.result(1), /step 1 is not held/);
    assert.equal(run.rescore(26, lengthParity).after.length, 16, "a step in the window rescores");
  } finally {
    await run.close();
  }
  const status = await cluster.status({ keys: 1000 });
  assert.equal(status.objects.objects, 4, "a closed run leaves only what it documents");
  assert.equal(await nodeCacheObjects(0), 0, "the node cache dropped the released app's copies");
});

test("a new run of the name replaces the old one's objects; at maxLag 1 one closed with a step's rollouts in flight leaves only what it documents; while it runs, the window plus the step ahead", async () => {
  const name = "lifetimes";
  // Another seed is another run (its fingerprint differs): it takes over the name's weights, run state, rollout setup and corpus.
  const run = await SearchR1Run.create(options(name, { keepSteps: 3, maxLag: 1, seed: 8 }));
  run.setReward(lengthParity);
  let during: string[];
  try {
    for (let i = 0; i < 8; i++) await run.step();
    during = (await heldKeys(name)).keys;
  } finally {
    await run.close();
  }
  const steps = new Set(during.filter((k) => k.includes("/steps/")).map((k) => Number(/\/steps\/(\d+)\//.exec(k)![1])));
  assert.ok([6, 7, 8].every((s) => steps.has(s)) && [...steps].every((s) => s >= 6 && s <= 9), `steps 6–8, and perhaps 9 (ahead): ${[...steps].join(", ")}`);
  assert.deepEqual(during.filter((k) => !k.includes("/steps/")), documented(name), "one set of documented objects: the new run's replaced the old one's");
  const status = await cluster.status({ keys: 1000 });
  assert.equal(status.objects.objects, 4, "the closed run's documented objects only: step 9's rollouts started ahead were deleted too");
});

test("an app released by its keep-alive loses its scratch objects (its driver vanished mid-step); what it documents stays", async () => {
  const app = await connect({ name: "lifetimes-gone", head: cluster.endpoint, keepAliveMs: 300 });
  await app.objects.put({ w: 1 }, { key: "runs/gone/weights" });
  await app.objects.put([1, 2, 3], { key: "runs/gone/steps/4/traj-a", scratch: true });
  await app.objects.put([4], { scratch: true });
  assert.equal((await heldKeys("lifetimes-gone")).count, 3);
  await app.disconnect();
  await waitFor("the app's release", async () => ((await cluster.status()).apps.some((a: any) => a.name === "lifetimes-gone") ? undefined : true));
  assert.equal((await cluster.status()).objects.objects, 4 + 1, "the scratch objects went with the app; its weights stayed");
  const again = await connect({ name: "lifetimes-gone", head: cluster.endpoint });
  try {
    assert.deepEqual((await heldKeys("lifetimes-gone")).keys, ["runs/gone/weights"]);
  } finally {
    await again.close();
  }
});
