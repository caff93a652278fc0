/**
 * Deadlines on real processes: a call past its deadline fails with a
 * TimeoutError naming service, executor and call, and that executor is killed
 * and replaced (also when it is stuck in synchronous code); a queued call
 * times out too; an aborted call is dropped; a service whose executors never
 * become ready fails its ready wait and its init deadline with clear errors;
 * a gang call past its deadline fails the gang.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { GangFailedError, ServiceStartError, TimeoutError } from "../../sdk/errors/index.js";
import { LIVENESS, executorsOf, rejection, startCluster, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";
import type { Sleeper } from "../helpers/liveness-services.js";

const SLEEPER = { module: LIVENESS, export: "Sleeper" };
let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "8g" }] });
  app = await connect({ name: "deadlines", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("a call past its deadline fails with TimeoutError naming service, executor and call; the executor is replaced", async () => {
  const pool = await app.service<Sleeper>(SLEEPER, { name: "slow", warmup: 1, max: 1 });
  const before = await pool.call("whoami");
  const { error, ms } = await rejection(pool.withOptions({ timeoutMs: 400 }).call("sleep", 30_000));
  assert.ok(error instanceof TimeoutError, String(error));
  assert.equal(error.service, "slow");
  assert.equal(error.executorId, before.executorId);
  assert.equal(typeof error.callId, "number");
  assert.match(error.message, /timed out after 0\.4 s on executor .*killed and is being replaced/);
  assert.ok(ms < 400 + 2000, `answered ${ms} ms after the call, deadline 400 ms`);
  await waitForExit("the timed-out executor", before.pid);
  const after = await pool.call("whoami");
  assert.notEqual(after.executorId, before.executorId, "a fresh executor answers");
  assert.equal(after.calls, 0);
  await pool.stop();
});

test("callTimeoutMs is the service's default, and kills an executor stuck in synchronous code", async () => {
  const pool = await app.service<Sleeper>(SLEEPER, { name: "spinner", warmup: 1, max: 1, callTimeoutMs: 500 });
  assert.equal(pool.info.callTimeoutMs, 500);
  const before = await pool.call("whoami");
  const { error } = await rejection(pool.call("spin", 20_000));
  assert.ok(error instanceof TimeoutError, String(error));
  assert.equal(error.executorId, before.executorId);
  await waitForExit("the spinning executor", before.pid, 5000);
  assert.notEqual((await pool.call("whoami")).executorId, before.executorId);
  await pool.stop();
});

test("a call still queued at its deadline fails saying why; a running call without a deadline is untouched", async () => {
  const pool = await app.service<Sleeper>(SLEEPER, { name: "queue", warmup: 1, max: 1 });
  const first = pool.call("sleep", 1500);
  const { error } = await rejection(pool.withOptions({ timeoutMs: 300 }).call("whoami"));
  assert.ok(error instanceof TimeoutError, String(error));
  assert.equal(error.executorId, undefined, "it never reached an executor");
  assert.match(error.message, /while queued: all 1 ready executor\(s\) of 'queue' were busy/);
  const done = await first;
  assert.equal(typeof done.executorId, "string");
  await pool.stop();
});

test("an aborted call rejects at once with the signal's reason and leaves the queue", async () => {
  const pool = await app.service<Sleeper>(SLEEPER, { name: "abort", warmup: 1, max: 1 });
  const busy = pool.call("sleep", 1500);
  const ac = new AbortController();
  const queued = pool.withOptions({ signal: ac.signal }).call("sleep", 10);
  await waitFor("the second call to be queued", async () => {
    const svc = (await cluster.status()).apps.find((a: any) => a.name === "deadlines").services.find((s: any) => s.name === "abort");
    return svc.queued === 1 ? true : undefined;
  });
  ac.abort(new Error("user pressed stop"));
  const { error, ms } = await rejection(queued);
  assert.equal(error.message, "user pressed stop");
  assert.ok(ms < 500);
  await waitFor("the aborted call to leave the queue", async () => {
    const svc = (await cluster.status()).apps.find((a: any) => a.name === "deadlines").services.find((s: any) => s.name === "abort");
    return svc.queued === 0 ? true : undefined;
  });
  await busy;
  const me = await pool.call("whoami");
  assert.equal(me.calls, 1, "the aborted call never ran");
  await pool.stop();
});

test("service() fails with TimeoutError when executors are not ready within readyTimeoutMs", async () => {
  const { error } = await rejection(app.service({ module: LIVENESS, export: "HangingInit" }, { name: "hang-ready", readyTimeoutMs: 500 }));
  assert.ok(error instanceof TimeoutError, String(error));
  assert.match(error.message, /service 'hang-ready' was not ready within 0\.5 s: state starting, 0 ready and 1 starting/);
  await app.stopService("hang-ready");
});

test("an executor whose init outlives initTimeoutMs is killed and the service fails with ServiceStartError", async () => {
  const { error } = await rejection(app.service({ module: LIVENESS, export: "HangingInit" }, { name: "hang-init", initTimeoutMs: 800 }));
  assert.ok(error instanceof ServiceStartError, String(error));
  assert.match(error.message, /executor x\d+ on agent n1 was not ready within its init timeout of 0\.8 s.*killed/);
  await waitFor("the hung executor to be gone", async () => (executorsOf(await cluster.status(), "deadlines", "hang-init").length === 0 ? true : undefined), 5000);
});

test("a gang call past its deadline fails with TimeoutError and fails the gang naming the rank", async () => {
  const gang = await app.service<Sleeper>(SLEEPER, { name: "gang", warmup: 2, autoscale: false });
  const { error } = await rejection(gang.withOptions({ timeoutMs: 400 }).callRank(1, "sleep", 30_000));
  assert.ok(error instanceof TimeoutError, String(error));
  assert.equal(error.executorId, gang.members[1]!.executorId);
  const next = await rejection(gang.callRank(0, "whoami"));
  assert.ok(next.error instanceof GangFailedError, String(next.error));
  assert.equal(next.error.rank, 1);
  assert.equal(next.error.service, "gang");
  assert.equal(next.error.executorId, gang.members[1]!.executorId);
  for (const m of gang.members) {
    await waitFor(`member ${m.executorId} to stop`, async () => (executorsOf(await cluster.status(), "deadlines", "gang").some((e: any) => e.id === m.executorId) ? undefined : true), 15_000);
  }
});
