/**
 * A head restart keeps the work: kill -9 of a head that has a data dir and a
 * restart on the same port and data dir. The agents re-register with their
 * live executors, which the new head adopts: a pool and a gang keep the same
 * processes with the same state (counter values, init ran once), the gang
 * keeps its ranks and rendezvous, a fresh connect() with the app's name finds
 * them and its calls succeed. A call in flight during the crash ends well
 * within its deadline with the retryable HeadRestartedError, and a gang that
 * lost a member while the head was down fails naming the rank.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { HeadRestartedError } from "../../sdk/errors/index.js";
import { CLI, FIXTURES, pidAlive, rejection, startHeadWithData, waitFor, waitForExit } from "../helpers/cluster.js";
import type { Counter } from "../fixtures/services.js";

const ref = { module: FIXTURES, export: "Counter" };
// Deadlines everywhere, so a regression fails fast instead of hanging.
const poolOpts = { name: "counter", resreq: "cpu=1", warmup: 2, max: 2, readyTimeoutMs: 20_000 };
const gangOpts = { name: "ring", resreq: "cpu=1", warmup: 2, autoscale: false as const, readyTimeoutMs: 20_000 };
const lossyOpts = { name: "lossy", resreq: "cpu=1", warmup: 2, autoscale: false as const, readyTimeoutMs: 20_000 };
const callDeadline = { timeoutMs: 10_000 };


test("kill -9 of the head and a restart on the same port and data dir: warm executors are adopted with their state", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-data-"));
  const first = startHeadWithData("tcp://127.0.0.1:0", dataDir);
  const endpoint = await first.endpoint;
  const agents = ["n1", "n2"].map((id) =>
    spawn(process.execPath, [CLI, "agent", "--head", endpoint, "--id", id, "--cpus", "3", "--mem", "4g", "--gpus", "0", "--work-dir", mkdtempSync(path.join(os.tmpdir(), `hearth-${id}-`))], { stdio: "ignore" }),
  );
  let second: ReturnType<typeof startHeadWithData> | undefined;
  const app = await connect({ name: "keep", head: endpoint });
  try {
    await waitFor("both agents to register", async () => ((await app.status()).agents.length === 2 ? true : undefined));
    const pool = await app.service<Counter>(ref, poolOpts);
    const gang = await app.service<Counter>(ref, gangOpts);
    const lossy = await app.service<Counter>(ref, lossyOpts);
    const members = await pool.members();
    assert.equal(members.length, 2);
    await Promise.all(members.map((m, i) => pool.callMember(m.executorId, "add", 5 + i)));
    await gang.broadcast("add", [[10], [20]]);
    const poolBefore = await pool.broadcastMembers("get");
    const gangBefore = await gang.broadcast("get", [[], []]);
    const lossyBefore = await lossy.broadcast("get", [[], []]);

    const deadlineMs = 20_000;
    const inflight = pool.withOptions({ timeoutMs: deadlineMs }).callMember(members[0]!.executorId, "sleep", 1500);
    await waitFor("the call to be running", async () => {
      const st = await app.status();
      return st.apps.find((a) => a.name === "keep")?.services.find((s) => s.name === "counter")?.inflight === 1 ? true : undefined;
    });
    const ended = rejection(inflight);
    first.proc.kill("SIGKILL");
    await waitForExit("the first head", first.proc.pid!, 5000);
    // While the head is down, one gang member dies: that gang cannot come back whole.
    process.kill(lossyBefore[1]!.pid, "SIGKILL");
    await waitForExit("lossy rank 1", lossyBefore[1]!.pid, 5000);
    second = startHeadWithData(endpoint, dataDir);
    assert.equal(await second.endpoint, endpoint);

    const { error, ms } = await ended;
    assert.ok(error instanceof HeadRestartedError, String(error));
    assert.equal(error.retryable, true);
    assert.ok(ms < deadlineMs, `the in-flight call ended ${ms} ms after the kill (deadline ${deadlineMs} ms)`);
    await app.disconnect().catch(() => undefined); // refused (restarted), but closes the socket

    const again = await connect({ name: "keep", head: endpoint });
    try {
      assert.equal(again.reattached, true, "the restarted head restored the app");
      assert.deepEqual(again.services.map((s) => s.name).sort(), ["counter", "lossy", "ring"]);
      const pool2 = (await again.service<Counter>(ref, poolOpts)).withOptions(callDeadline);
      assert.equal(pool2.info.id, pool.info.id, "the same service, not a new one");
      await waitFor("both pool executors to be adopted", async () => ((await pool2.members()).length === 2 ? true : undefined));
      const poolAfter = await pool2.broadcastMembers("get");
      const byId = (xs: typeof poolBefore) => Object.fromEntries(xs.map((x) => [x.executorId, x.result]));
      assert.deepEqual(byId(poolAfter), byId(poolBefore), "same executors, same pids, same counters, init ran once");
      assert.equal(typeof (await pool2.call("add", 1)), "number", "a new call succeeds");

      const gang2 = (await again.service<Counter>(ref, gangOpts)).withOptions(callDeadline);
      assert.deepEqual(gang2.members.map((m) => [m.rank, m.executorId]), gang.members.map((m) => [m.rank, m.executorId]), "ranks kept");
      assert.deepEqual(gang2.info.rendezvous, gang.info.rendezvous, "rendezvous kept");
      assert.deepEqual(await gang2.broadcast("get", [[], []]), gangBefore, "same pids and counters per rank");
      assert.deepEqual(await gang2.broadcast("add", [[1], [1]]), [11, 21]);

      const failed = await waitFor("the lossy gang to fail", async () => {
        const st = await again.status();
        const s = st.apps.find((a) => a.name === "keep")?.services.find((x) => x.name === "lossy");
        return s?.state === "failed" ? s : undefined;
      }, 15_000);
      assert.match(failed.error ?? "", /gang 'lossy' lost rank 1 in the head restart/);
      await waitForExit("lossy rank 0 (stopped with its gang)", lossyBefore[0]!.pid, 15_000);
      assert.ok(agents.every((a) => pidAlive(a.pid!)), "the agents lived through it");
    } finally {
      await again.close().catch(() => undefined);
    }
  } finally {
    await app.close().catch(() => undefined);
    first.proc.kill("SIGKILL");
    second?.proc.kill("SIGTERM");
    for (const a of agents) a.kill("SIGTERM");
    for (const a of agents) await waitForExit("an agent", a.pid!, 15_000).catch(() => a.kill("SIGKILL"));
    if (second) await waitForExit("the second head", second.proc.pid!, 15_000).catch(() => second!.proc.kill("SIGKILL"));
  }
});
