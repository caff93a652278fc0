/**
 * A pool on a real Slurm: warmup 1 is one job; load grows it to 3 jobs (one
 * agent each, on either node); idle executors stop after the idle timeout and
 * their jobs are cancelled, back to 1. A killed agent's call is retried on
 * another executor, close() cancels every job, and the head lets in only
 * CURVE clients with the app's keys.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { statSync } from "node:fs";
import { curveKeyPair } from "zeromq";
import type { App } from "../../sdk/runtime/app.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { defaultCurveKeys } from "../../sdk/engines/slurm/index.js";
import { loadCurveKeys } from "../../sdk/wire/curve.js";
import { ConnectError } from "../../sdk/wire/errors.js";
import type { Where } from "./services.js";
import { SERVICES, eventually, startWorld, type SlurmWorld } from "./setup.js";

let world: SlurmWorld;
let app: App;

before(async () => {
  world = await startWorld();
  app = await world.connect("slurm-pool");
});

after(async () => {
  await world?.stop();
});

test("a pool with warmup 1 grows to 3 jobs under load and shrinks back to 1 when idle", async () => {
  const t0 = Date.now();
  const pool = await app.service<Where>({ module: SERVICES, export: "Where" }, { name: "pool", resreq: "cpu=1,mem=256m", warmup: 1, max: 3, idleTimeout: 1500 });
  const readyMs = Date.now() - t0;
  let st = await app.status();
  assert.equal(st.slurm!.jobs.length, 1, "warmup 1 is one job");
  const first = st.slurm!.jobs[0]!;
  assert.match(first.id, /^\d+$/);
  assert.equal(first.state, "RUNNING");
  assert.ok(first.startLatencyMs !== null, "the job's agent registered");
  const placement = await pool.call("placement");
  assert.equal(placement.jobId, first.id, "the executor runs inside the Slurm job");
  assert.match(placement.node ?? "", /^n[12]$/);

  let peakJobs = 0;
  let peakExecutors = 0;
  const watch = setInterval(() => {
    void app.status().then((s) => {
      peakJobs = Math.max(peakJobs, s.slurm!.jobs.length);
      peakExecutors = Math.max(peakExecutors, s.apps[0]!.services[0]!.executors.length);
    });
  }, 100);
  const tLoad = Date.now();
  const results = await Promise.all(Array.from({ length: 9 }, () => pool.call("sleep", 1200)));
  const loadMs = Date.now() - tLoad;
  clearInterval(watch);
  assert.equal(results.length, 9);
  assert.equal(peakJobs, 3, "grew to max 3 jobs");
  assert.equal(peakExecutors, 3);
  st = await app.status();
  assert.equal(new Set(results.map((r) => r.jobId)).size, 3, "calls ran in 3 different jobs");
  assert.deepEqual(new Set(st.slurm!.jobs.map((j) => j.state)), new Set(["RUNNING"]));
  const nodes = new Set(results.map((r) => r.node));
  assert.ok([...nodes].every((n) => n === "n1" || n === "n2"));

  const tIdle = Date.now();
  await eventually("the pool to shrink back to 1 job", async () => {
    const s = await app.status();
    const jobs = (await world.slurm.jobs()).filter((j) => j.name === "hearth.slurm-pool");
    return s.slurm!.jobs.length === 1 && jobs.length === 1 && s.apps[0]!.services[0]!.executors.length === 1 ? true : undefined;
  });
  const shrinkMs = Date.now() - tIdle;
  assert.equal((await pool.call("sleep", 1)).executorId !== undefined, true, "the warm executor still answers");
  console.log(`# slurm pool: ready ${readyMs} ms (job start latency ${first.startLatencyMs} ms), 9 × 1.2 s calls in ${loadMs} ms, shrink in ${shrinkMs} ms`);
  await app.stopService("pool");
});

test("a killed agent's call is retried on another executor; a new job replaces it", async () => {
  const pool = await app.service<Where>({ module: SERVICES, export: "Where" }, { name: "lossy", resreq: "cpu=1,mem=256m", warmup: 2, max: 2 });
  const before = await app.status();
  assert.equal(before.slurm!.jobs.filter((j) => j.service === "lossy").length, 2);
  const pending = pool.call("sleep", 4000);
  const busy = await eventually("the call to run", async () => {
    const s = await app.status();
    return s.apps[0]!.services.find((x) => x.name === "lossy")!.executors.find((e) => e.inflight === 1);
  });
  const agent = (await app.status()).agents.find((a) => a.id === busy.agent)!;
  const victimJob = agent.labels["hearth.job"]!;
  process.kill(agent.pid, "SIGKILL");
  const result = await pending;
  assert.notEqual(result.executorId, busy.id, "answered by a surviving executor");
  assert.notEqual(result.jobId, victimJob);
  const st = await app.status();
  assert.equal((st.head as unknown as { calls: { retried: number } }).calls.retried, 1);
  await eventually("a replacement job", async () => {
    const s = await app.status();
    const jobs = s.slurm!.jobs.filter((j) => j.service === "lossy");
    return jobs.length === 2 && !jobs.some((j) => j.id === victimJob) && jobs.every((j) => j.agents.length === 1) ? true : undefined;
  });
  assert.equal(app.duplicateReplies, 0);
  await app.stopService("lossy");
});

test("close() cancels every job the app started", async () => {
  const other = await world.connect("slurm-close");
  await other.service<Where>({ module: SERVICES, export: "Where" }, { name: "a", resreq: "cpu=1", warmup: 2 });
  const jobs = (await other.status()).slurm!.jobs.map((j) => j.id);
  assert.equal(jobs.length, 2);
  const t0 = Date.now();
  await other.close();
  const closeMs = Date.now() - t0;
  const left = (await world.slurm.jobs()).filter((j) => jobs.includes(j.id));
  assert.deepEqual(left, [], "no job of the app is left in the queue");
  console.log(`# slurm close: ${jobs.length} jobs cancelled in ${closeMs} ms`);
});

test("the head accepts only CURVE clients holding the app's keys (generated on first use, mode 0600)", async () => {
  const keysFile = defaultCurveKeys(world.home);
  assert.equal(statSync(keysFile).mode & 0o777, 0o600);
  const keys = loadCurveKeys(keysFile);
  const plain = HeadClient.open(app.endpoint, { app: "intruder" }, { timeoutMs: 1500, home: world.home });
  await assert.rejects(plain, ConnectError, "a client without CURVE is not let in");
  const stranger = curveKeyPair();
  const wrong = HeadClient.open(app.endpoint, { app: "intruder" }, { timeoutMs: 1500, home: world.home, curve: { serverPublicKey: keys.serverPublicKey, ...stranger } });
  await assert.rejects(wrong, ConnectError, "a client with a key the head does not know is not let in");
  const { client } = await HeadClient.open(app.endpoint, { app: "friend" }, { timeoutMs: 5000, curve: keys, home: world.home });
  try {
    assert.ok(Array.isArray((await client.control("status", {})).agents));
    await client.control("close-app", {});
  } finally {
    client.close();
  }
});

test("with no driver left, the keep-alive releases the executors and the idle agents end their jobs", async () => {
  const orphan = await world.connect("slurm-orphan", { keepAliveMs: 500, slurm: { agentIdleExitMs: 1500 } });
  await orphan.service<Where>({ module: SERVICES, export: "Where" }, { name: "w", resreq: "cpu=1", warmup: 1 });
  const jobs = (await orphan.status()).slurm!.jobs.map((j) => j.id);
  assert.equal(jobs.length, 1);
  await orphan.disconnect(); // no engine watches the app any more
  await eventually("the job to end on its own", async () => ((await world.slurm.jobs()).some((j) => jobs.includes(j.id)) ? undefined : true), 20_000);
});
