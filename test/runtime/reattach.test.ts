/**
 * A second driver process reattaches to the same app and finds its executors
 * still warm; an app without drivers is released after its keep-alive.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { connect } from "../../sdk/connect.js";
import { FIXTURES, executorsOf, pidAlive, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import type { Counter } from "../fixtures/services.js";

const DRIVER = path.join(path.dirname(fileURLToPath(import.meta.url)), "../fixtures/driver.js");
let cluster: TestCluster;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "4g" }] });
});

after(async () => {
  await cluster?.stop();
});

function runDriver(app: string, add: number): { reattached: boolean; n: number; executorId: string; pid: number; initCount: number } {
  const out = execFileSync(process.execPath, [DRIVER, cluster.endpoint, app, String(add)], { encoding: "utf8", timeout: 30_000 });
  return JSON.parse(out.trim().split("\n").pop()!);
}

test("a second driver process reattaches and finds the same warm executor and state", () => {
  const first = runDriver("notebook", 5);
  assert.equal(first.reattached, false);
  assert.equal(first.n, 5);
  const second = runDriver("notebook", 3);
  assert.equal(second.reattached, true);
  assert.equal(second.n, 8, "state from the first driver is still there");
  assert.equal(second.executorId, first.executorId);
  assert.equal(second.pid, first.pid);
  assert.equal(second.initCount, 1, "init did not run again");
});

test("an app whose drivers are gone is released after its keep-alive; executors exit", async () => {
  const app = await connect({ name: "short-lived", head: cluster.endpoint, keepAliveMs: 1500 });
  const counter = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 1 });
  const { pid } = await counter.call("get");
  await app.disconnect();
  const st = await cluster.status();
  const entry = st.apps.find((a: any) => a.name === "short-lived");
  assert.ok(entry.releaseAt > Date.now(), "status shows when the app will be released");
  assert.equal(executorsOf(st, "short-lived", "Counter").length, 1, "still warm during keep-alive");
  await waitFor("the app to be released", async () => ((await cluster.status()).apps.some((a: any) => a.name === "short-lived") ? undefined : true), 10_000);
  await waitFor("the executor process to exit", () => (pidAlive(pid) ? undefined : true), 15_000);
});
