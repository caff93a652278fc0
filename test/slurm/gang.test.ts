/**
 * Gangs on a real Slurm: one job of N tasks, so Slurm grants every member or
 * none. Each node has one (fake) GPU, so a gang of 2 × gpu=1 spans both nodes;
 * its members all-reduce through their tensor engines (torch, gloo). A second
 * gang waits whole while the first holds the GPUs; a member's loss fails the
 * gang naming its rank, and the gang can be declared again.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { App } from "../../sdk/runtime/app.js";
import { GangFailedError } from "../../sdk/errors/index.js";
import type { Reducer, Where } from "./services.js";
import { SERVICES, eventually, startWorld, type SlurmWorld } from "./setup.js";

let world: SlurmWorld;
let app: App;

before(async () => {
  world = await startWorld();
  app = await world.connect("slurm-gang");
});

after(async () => {
  await world?.stop();
});

test("a gang of 2 spans both nodes in one job and all-reduces through the tensor engine (gloo)", async () => {
  const t0 = Date.now();
  const gang = await app.service<Reducer>({ module: SERVICES, export: "Reducer" }, { name: "dp", resreq: "cpu=1,mem=512m,gpu=1", warmup: 2, autoscale: false });
  const readyMs = Date.now() - t0;
  const st = await app.status();
  const jobs = st.slurm!.jobs.filter((j) => j.service === "dp");
  assert.equal(jobs.length, 1, "a gang is ONE Slurm job");
  assert.equal(jobs[0]!.tasks, 2);
  const where = await gang.broadcast("placement", [[], []]);
  assert.deepEqual(where.map((w) => w.rank), [0, 1]);
  assert.deepEqual(new Set(where.map((w) => w.node)), new Set(["n1", "n2"]), "one member per node");
  assert.deepEqual(where.map((w) => w.jobId), [jobs[0]!.id, jobs[0]!.id]);
  assert.deepEqual(where.map((w) => w.cudaVisibleDevices), ["0", "0"], "each member has its node's GPU from Slurm");

  // Rank 0 trains 3 rows × 2 tokens, rank 1 has 2 rows × 5 tokens: each sees the all-reduced sums.
  const [m0, m1] = await gang.broadcast("step", [[3, 2], [2, 5]]);
  assert.equal(m0!.tokens, 3 * 2 + 2 * 5);
  assert.equal(m1!.tokens, 16);
  assert.equal(m0!.rows, 5);
  assert.equal(m1!.rows, 5);
  assert.equal(m0!.loss, m1!.loss, "the loss is the global token mean on every rank");
  console.log(`# slurm gang: 2 members with torch engines ready in ${readyMs} ms (job start latency ${jobs[0]!.startLatencyMs} ms)`);
});

test("a second gang waits whole (PENDING in Slurm, no member started) while the GPUs are busy, then runs", async () => {
  const ref = { module: SERVICES, export: "Where" };
  let done = false;
  const waiting = app.service<Where>(ref, { name: "later", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  void waiting.then(() => (done = true), () => (done = true));
  const job = await eventually("the second gang's job", async () => (await app.status()).slurm!.jobs.find((j) => j.service === "later"));
  await new Promise((r) => setTimeout(r, 1500));
  const st = await app.status();
  const later = st.apps[0]!.services.find((s) => s.name === "later")!;
  assert.equal(later.state, "pending");
  assert.equal(later.executors.length, 0, "no partial gang");
  const queued = (await world.slurm.jobs()).find((j) => j.id === job.id)!;
  assert.equal(queued.state, "PENDING", "Slurm grants the job whole or not at all");
  assert.equal(st.slurm!.jobs.find((j) => j.id === job.id)!.agents.length, 0, "not a single agent of the waiting job started");
  assert.equal(done, false);

  const t0 = Date.now();
  await app.stopService("dp"); // its job is cancelled: the GPUs free up
  const gang = await waiting;
  const waitedMs = Date.now() - t0;
  const where = await gang.broadcast("placement", [[], []]);
  assert.deepEqual(new Set(where.map((w) => w.node)), new Set(["n1", "n2"]));
  assert.deepEqual(where.map((w) => w.jobId), [job.id, job.id]);
  console.log(`# slurm gang: the waiting gang ran ${waitedMs} ms after the first one stopped`);
});

test("a gang that loses a member fails naming the rank; its job is cancelled; declaring it again restarts it", async () => {
  const ref = { module: SERVICES, export: "Where" };
  const gang = await app.service<Where>(ref, { name: "later", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  const before = await app.status();
  const oldJob = before.slurm!.jobs.find((j) => j.service === "later")!;
  const rank1 = before.apps[0]!.services.find((s) => s.name === "later")!.executors.find((e) => e.rank === 1)!;
  const agent = before.agents.find((a) => a.id === rank1.agent)!;
  const pending = gang.broadcast("sleep", [[10_000], [10_000]]);
  await new Promise((r) => setTimeout(r, 300));
  process.kill(agent.pid, "SIGKILL"); // the node's agent is gone (as if the node died)
  await assert.rejects(pending, (e: unknown) => {
    assert.ok(e instanceof GangFailedError, String(e));
    assert.equal(e.rank, 1);
    assert.match(e.message, /gang 'later' lost rank 1/);
    return true;
  });
  await eventually("the failed gang's job to be cancelled", async () =>
    (await world.slurm.jobs()).some((j) => j.id === oldJob.id) ? undefined : true,
  );
  const again = await app.service<Where>(ref, { name: "later", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  const where = await again.broadcast("placement", [[], []]);
  assert.notEqual(where[0]!.jobId, oldJob.id, "a new job");
  assert.deepEqual(where.map((w) => w.rank), [0, 1]);
});
