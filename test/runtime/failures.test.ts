/**
 * An executor killed with SIGKILL in the middle of a call: the call is retried
 * on another executor and answered exactly once (checked by an independent
 * raw-protocol client); the pool replaces the dead executor.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { FIXTURES, executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { RawClient } from "../helpers/raw-client.js";
import type { Counter } from "../fixtures/services.js";

let cluster: TestCluster;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

test("kill -9 of an executor mid-call: the call completes once, on another executor", async () => {
  const raw = new RawClient(cluster.endpoint);
  try {
    await raw.request("hello", { app: "failures" });
    const info = await raw.request("service", { spec: { name: "pool", module: FIXTURES, export: "Counter", resreq: "cpu=1", warmup: 2, max: 2 } });
    await raw.request("ready", { service: "pool" });
    await raw.call(1, info.id, "sleep", [1500]);
    const busy = await waitFor("the call to be running", async () => executorsOf(await cluster.status(), "failures", "pool").find((e: any) => e.inflight === 1));
    process.kill(busy.pid, "SIGKILL");
    const answer = await raw.waitFor((m) => m.header.cid === 1, 20_000);
    assert.equal(answer.header.t, "result", `expected a result, got ${JSON.stringify(answer.header)}`);
    const value = answer.payload as { executorId: string };
    assert.notEqual(value.executorId, busy.id, "answered by a surviving executor");
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(raw.answersTo(1).length, 1, "answered exactly once");
    const st = await cluster.status();
    assert.equal(st.head.calls.retried, 1);
    const dead = st.apps.find((a: any) => a.name === "failures").services[0].dead;
    assert.deepEqual(dead.map((d: any) => [d.id, d.state, d.signal]), [[busy.id, "dead", "SIGKILL"]], "status lists the dead executor and how it ended");
    // The pool is back to its warmup of 2 live executors, without the dead one.
    await waitFor("a replacement executor", async () => {
      const ex = executorsOf(await cluster.status(), "failures", "pool");
      return ex.length === 2 && ex.every((e: any) => e.state === "idle") && !ex.some((e: any) => e.id === busy.id) ? true : undefined;
    });
    await raw.request("close-app");
  } finally {
    await raw.close();
  }
});

test("many calls in flight while executors die: every call answered exactly once (SDK)", async () => {
  const app: App = await connect({ name: "failures-sdk", head: cluster.endpoint });
  try {
    const pool = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 3, max: 3 });
    const calls = Array.from({ length: 30 }, (_, i) => pool.call("sleep", 100).then((r) => ({ i, ...r })));
    await new Promise((r) => setTimeout(r, 250));
    const victims = executorsOf(await cluster.status(), "failures-sdk", "Counter").filter((e: any) => e.inflight > 0).slice(0, 2);
    for (const v of victims) process.kill(v.pid, "SIGKILL");
    const results = await Promise.all(calls);
    assert.equal(results.length, 30);
    assert.ok(victims.length >= 1);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(app.duplicateReplies, 0);
  } finally {
    await app.close();
  }
});
