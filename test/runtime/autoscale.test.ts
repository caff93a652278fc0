/**
 * A pool on real processes grows while calls pend and shrinks back to its
 * warmup after the idle timeout.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { FIXTURES, executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import type { Counter } from "../fixtures/services.js";

let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "8g" }] });
  app = await connect({ name: "autoscale", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("a pool grows under 20 pending calls (up to max) and shrinks to warmup after idle", async () => {
  const pool = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 1, max: 3, idleTimeout: 1500 });
  assert.equal(executorsOf(await cluster.status(), "autoscale", "Counter").length, 1);
  let peak = 0;
  const sampler = setInterval(() => {
    void cluster.status().then((st) => (peak = Math.max(peak, executorsOf(st, "autoscale", "Counter").length)));
  }, 50);
  const results = await Promise.all(Array.from({ length: 20 }, () => pool.call("sleep", 300)));
  clearInterval(sampler);
  const used = new Set(results.map((r) => r.executorId));
  assert.equal(used.size, 3, `20 pending calls should spread over max=3 executors, used ${[...used].join(",")}`);
  assert.equal(peak, 3, "never more than max");
  // After the idle timeout the extra executors stop; warmup stays.
  await waitFor("the pool to shrink to warmup", async () => (executorsOf(await cluster.status(), "autoscale", "Counter").length === 1 ? true : undefined), 15_000);
  const left = executorsOf(await cluster.status(), "autoscale", "Counter");
  assert.equal(left[0].state, "idle");
  assert.equal(typeof (await pool.call("get")).n, "number", "the remaining executor still answers");
});
