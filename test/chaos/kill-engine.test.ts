/**
 * Chaos: kill -9 of a tensor engine while 200 calls are in flight on 2
 * executors that answer through their engines. The executor's heartbeat
 * reports the dead engine at once; the head recycles that executor (its warm
 * state is gone), its calls run again on the other one and on the
 * replacement, whose init starts a new engine. Every call is answered, once,
 * within its deadline. Prints the detection time and when the last call ended.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { DIST, executorsOf, startCluster, waitFor, waitForExit } from "../helpers/cluster.js";
import { account, loggedAfter, report, salvo } from "./harness.js";
import type { EngineWorker } from "./services.js";

const ref = { module: path.join(DIST, "test/chaos/services.js"), export: "EngineWorker" };
const CALLS = 200;
const DEADLINE_MS = 60_000;
const CALL_MS = 2_000;

test("kill -9 of a tensor engine with 200 calls in flight: 0 lost, 0 answered twice, all within their deadline", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 3, mem: "8g" }] });
  const app = await connect({ name: "chaos-engine", head: cluster.endpoint });
  try {
    const pool = await app.service<EngineWorker>(ref, { name: "engines", resreq: "cpu=1", warmup: 2, max: 2, concurrency: 100, readyTimeoutMs: 120_000 });
    await waitFor("2 ready executors", async () => ((await pool.members()).length === 2 ? true : undefined), 120_000);
    const before = await pool.withOptions({ timeoutMs: 10_000 }).broadcastMembers("pids");
    const calls = salvo(CALLS, (tag) => pool.withOptions({ timeoutMs: DEADLINE_MS }).call("tagged", tag, CALL_MS));
    await waitFor(`all ${CALLS} calls running`, async () => (executorsOf(await cluster.status(), "chaos-engine", "engines").reduce((n, e) => n + e.inflight, 0) === CALLS ? true : undefined));
    const busy = executorsOf(await cluster.status(), "chaos-engine", "engines").find((e) => e.inflight > 0)!;
    const victim = before.find((m) => m.executorId === busy.id)!.result;
    await waitFor("its heartbeat to carry its engine", async () => {
      const e = executorsOf(await cluster.status(), "chaos-engine", "engines").find((x) => x.id === busy.id);
      return JSON.stringify(e?.engines.map((x: any) => [x.pid, x.state])) === JSON.stringify([[victim.enginePid, "running"]]) ? true : undefined;
    }, 5000);
    const killedAt = calls.markKill();
    process.kill(victim.enginePid, "SIGKILL");

    const { answered, failed, lastAfterKillMs } = account(await calls.settled(), DEADLINE_MS);
    assert.deepEqual(failed.map((o) => `${o.tag}: ${String(o.error)}`), [], "no call failed");
    assert.equal(answered.length, CALLS);
    assert.ok(answered.every((o) => o.value!.enginePid !== victim.enginePid || o.afterKillMs <= 0), "no answer came through the dead engine after its death");
    await waitForExit("the executor that lost its engine (recycled)", victim.executorPid, 10_000);
    const detectedMs = loggedAfter(cluster.headLog(), new RegExp(`recycling executor ${busy.id} of 'engines': its tensor engine \\(pid ${victim.enginePid}\\) died`), killedAt);
    assert.ok(detectedMs !== undefined, "the head logged the recycle");
    const after = await waitFor("a replacement with a new engine", async () => {
      const m = await pool.withOptions({ timeoutMs: 10_000 }).broadcastMembers("pids");
      return m.length === 2 && !m.some((x) => x.executorId === busy.id) ? m : undefined;
    }, 90_000);
    assert.ok(after.every((m) => m.result.enginePid !== victim.enginePid));
    await waitFor("the pool to be idle", async () => (executorsOf(await cluster.status(), "chaos-engine", "engines").every((e) => e.inflight === 0) ? true : undefined));
    assert.equal(app.duplicateReplies, 0, "no call answered twice");
    const st = await cluster.status();
    report("engine", { calls: CALLS, answered: answered.length, failed: 0, retried: st.head.calls.retried, "answered twice": 0, "detected in": `${detectedMs} ms`, "last call ended": `${lastAfterKillMs} ms after the kill` });
  } finally {
    await app.close();
    await cluster.stop();
  }
});
