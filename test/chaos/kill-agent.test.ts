/**
 * Chaos: kill -9 of an agent while 200 calls are in flight on 4 executors,
 * 2 on each of 2 agents. The dead agent's executors exit on their own (no
 * orphans) and tell the head first, so the head declares the silent agent
 * lost after SUSPECT_AGENT_TIMEOUT_MS (2.5 s) instead of its agent timeout
 * (6 s); its calls run again on the other agent; every call is answered,
 * once, within its deadline. Prints the detection time and when the last
 * call ended.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { DIST, executorsOf, startCluster, waitFor, waitForExit } from "../helpers/cluster.js";
import { account, loggedAfter, report, salvo } from "./harness.js";
import type { Tagger } from "./services.js";

const ref = { module: path.join(DIST, "test/chaos/services.js"), export: "Tagger" };
const CALLS = 200;
const DEADLINE_MS = 30_000;
const CALL_MS = 2_000;

test("kill -9 of an agent with 200 calls in flight: 0 lost, 0 answered twice, all within their deadline", { timeout: 120_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "4g" }, { id: "n2", cpus: 2, mem: "4g" }] });
  const app = await connect({ name: "chaos-agent", head: cluster.endpoint });
  try {
    const pool = await app.service<Tagger>(ref, { name: "tags", resreq: "cpu=1", warmup: 4, max: 4, concurrency: 50, readyTimeoutMs: 60_000 });
    await waitFor("4 ready executors", async () => ((await pool.members()).length === 4 ? true : undefined), 60_000);
    const calls = salvo(CALLS, (tag) => pool.withOptions({ timeoutMs: DEADLINE_MS }).call("tagged", tag, CALL_MS));
    await waitFor(`all ${CALLS} calls running`, async () => (executorsOf(await cluster.status(), "chaos-agent", "tags").reduce((n, e) => n + e.inflight, 0) === CALLS ? true : undefined));
    const onVictim = executorsOf(await cluster.status(), "chaos-agent", "tags").filter((e) => e.agent === "n2");
    assert.equal(onVictim.length, 2, "two executors on the agent to kill");
    const lost = onVictim.reduce((n, e) => n + e.inflight, 0);
    const killedAt = calls.markKill();
    cluster.agents.get("n2")!.kill("SIGKILL");
    for (const e of onVictim) await waitForExit(`executor ${e.id} of the dead agent`, e.pid, 5000);

    const { answered, failed, lastAfterKillMs } = account(await calls.settled(), DEADLINE_MS);
    assert.deepEqual(failed.map((o) => `${o.tag}: ${String(o.error)}`), [], "no call failed");
    assert.equal(answered.length, CALLS);
    await waitFor("the pool to be idle", async () => (executorsOf(await cluster.status(), "chaos-agent", "tags").every((e) => e.inflight === 0) ? true : undefined));
    assert.equal(app.duplicateReplies, 0, "no call answered twice");
    const st = await cluster.status();
    assert.ok(st.head.calls.retried <= lost, `at most the dead agent's ${lost} calls ran again (${st.head.calls.retried})`);
    const detectedMs = loggedAfter(cluster.headLog(), /agent n2 lost: no heartbeat for \d+ ms \(its executors reported it gone\)/, killedAt);
    assert.ok(detectedMs !== undefined, "the head logged the loss");
    report("agent", { calls: CALLS, answered: answered.length, failed: 0, retried: st.head.calls.retried, "answered twice": 0, "detected in": `${detectedMs} ms`, "last call ended": `${lastAfterKillMs} ms after the kill` });
  } finally {
    await app.close();
    await cluster.stop();
  }
});
