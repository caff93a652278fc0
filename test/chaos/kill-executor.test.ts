/**
 * Chaos: kill -9 of an executor while 200 calls are in flight (50 on each of
 * 4 executors). Its calls go to the survivors; every call is answered, once,
 * within its deadline. Prints the head's detection time (the agent's exit
 * report) and when the last call ended.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { DIST, executorsOf, startCluster, waitFor } from "../helpers/cluster.js";
import { account, loggedAfter, report, salvo } from "./harness.js";
import type { Tagger } from "./services.js";

const ref = { module: path.join(DIST, "test/chaos/services.js"), export: "Tagger" };
const CALLS = 200;
const DEADLINE_MS = 30_000;
const CALL_MS = 2_000;

test("kill -9 of an executor with 200 calls in flight: 0 lost, 0 answered twice, all within their deadline", { timeout: 120_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "8g" }] });
  const app = await connect({ name: "chaos-executor", head: cluster.endpoint });
  try {
    const pool = await app.service<Tagger>(ref, { name: "tags", resreq: "cpu=1", warmup: 4, max: 4, concurrency: 50, readyTimeoutMs: 60_000 });
    await waitFor("4 ready executors", async () => ((await pool.members()).length === 4 ? true : undefined), 60_000);
    const calls = salvo(CALLS, (tag) => pool.withOptions({ timeoutMs: DEADLINE_MS }).call("tagged", tag, CALL_MS));
    await waitFor(`all ${CALLS} calls running`, async () => (executorsOf(await cluster.status(), "chaos-executor", "tags").reduce((n, e) => n + e.inflight, 0) === CALLS ? true : undefined));
    const victim = executorsOf(await cluster.status(), "chaos-executor", "tags").find((e) => e.inflight > 0)!;
    const killedAt = calls.markKill();
    process.kill(victim.pid, "SIGKILL");

    const { answered, failed, lastAfterKillMs } = account(await calls.settled(), DEADLINE_MS);
    assert.deepEqual(failed.map((o) => `${o.tag}: ${String(o.error)}`), [], "no call failed");
    assert.equal(answered.length, CALLS);
    assert.ok(answered.every((o) => o.value!.executorId !== victim.id || o.afterKillMs <= 0), "nothing answered by the dead executor after its death");
    await waitFor("the pool to be idle", async () => (executorsOf(await cluster.status(), "chaos-executor", "tags").every((e) => e.inflight === 0) ? true : undefined));
    assert.equal(app.duplicateReplies, 0, "no call answered twice");
    const st = await cluster.status();
    assert.equal(st.head.calls.retried, victim.inflight, "exactly the dead executor's calls ran again");
    const detectedMs = loggedAfter(cluster.headLog(), new RegExp(`executor ${victim.id} of 'tags' died`), killedAt);
    assert.ok(detectedMs !== undefined, "the head logged the death");
    report("executor", { calls: CALLS, answered: answered.length, failed: 0, retried: victim.inflight, "answered twice": 0, "detected in": `${detectedMs} ms`, "last call ended": `${lastAfterKillMs} ms after the kill` });
  } finally {
    await app.close();
    await cluster.stop();
  }
});
