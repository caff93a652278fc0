/**
 * Chaos: kill -9 of the head (started with a data dir) while 200 calls are in
 * flight, and a restart on the same endpoint and data dir. Every pending call
 * ends within its deadline with the retryable HeadRestartedError as soon as
 * the driver hears the new head; the driver reconnects, finds the same warm
 * executors (adopted, same pids) and retries them; every call ends answered,
 * once. Calls that were running when the head died ran to their end on their
 * executor and run again on retry (at-least-once, as docs/architecture.md
 * says). Prints the restart and detection times and when the last call ended.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { HeadRestartedError } from "../../sdk/errors/index.js";
import { CLI, DIST, startHeadWithData, waitFor, waitForExit } from "../helpers/cluster.js";
import { account, report, salvo } from "./harness.js";
import type { Tagger } from "./services.js";

const ref = { module: path.join(DIST, "test/chaos/services.js"), export: "Tagger" };
const opts = { name: "tags", resreq: "cpu=1", warmup: 4, max: 4, concurrency: 50, readyTimeoutMs: 60_000 };
const CALLS = 200;
const DEADLINE_MS = 30_000;
const CALL_MS = 2_000;


test("kill -9 of the head with 200 calls in flight: every call ends within its deadline, retried once, answered once", { timeout: 120_000 }, async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-chaos-head-"));
  const first = startHeadWithData("tcp://127.0.0.1:0", dataDir);
  const endpoint = await first.endpoint;
  const agent = spawn(process.execPath, [CLI, "agent", "--head", endpoint, "--id", "n1", "--cpus", "4", "--mem", "8g", "--gpus", "0", "--work-dir", mkdtempSync(path.join(os.tmpdir(), "hearth-n1-"))], { stdio: "ignore" });
  let second: ReturnType<typeof startHeadWithData> | undefined;
  const app = await connect({ name: "chaos-head", head: endpoint });
  let again: Awaited<ReturnType<typeof connect>> | undefined;
  try {
    await waitFor("the agent to register", async () => ((await app.status()).agents.length === 1 ? true : undefined));
    const pool = await app.service<Tagger>(ref, opts);
    await waitFor("4 ready executors", async () => ((await pool.members()).length === 4 ? true : undefined), 60_000);
    const pidsBefore = (await pool.members()).map((m) => m.pid).sort();
    const calls = salvo(CALLS, (tag) => pool.withOptions({ timeoutMs: DEADLINE_MS }).call("tagged", tag, CALL_MS));
    await waitFor(`all ${CALLS} calls running`, async () => ((await app.status()).apps[0]?.services[0]?.inflight === CALLS ? true : undefined));
    const killedAt = calls.markKill();
    first.proc.kill("SIGKILL");
    await waitForExit("the first head", first.proc.pid!, 5000);
    second = startHeadWithData(endpoint, dataDir);
    assert.equal(await second.endpoint, endpoint);
    const restartMs = Date.now() - killedAt;

    const outcomes = account(await calls.settled(), DEADLINE_MS);
    for (const o of outcomes.failed) {
      assert.ok(o.error instanceof HeadRestartedError, `call ${o.tag}: ${String(o.error)}`);
      assert.equal(o.error.retryable, true);
    }
    const detectedMs = Math.min(...outcomes.failed.map((o) => o.afterKillMs));
    assert.ok(outcomes.failed.length > 0, "calls were pending on the dead head");
    assert.equal(app.duplicateReplies, 0);
    await app.disconnect().catch(() => undefined); // refused (the head restarted), but closes the socket

    again = await connect({ name: "chaos-head", head: endpoint });
    assert.equal(again.reattached, true);
    const pool2 = await again.service<Tagger>(ref, opts);
    assert.equal(pool2.info.id, pool.info.id, "the same service");
    await waitFor("the 4 executors to be adopted", async () => ((await pool2.members()).length === 4 ? true : undefined), 20_000);
    assert.deepEqual((await pool2.members()).map((m) => m.pid).sort(), pidsBefore, "the same warm executors");
    const retried = salvo(outcomes.failed.length, (i) => pool2.withOptions({ timeoutMs: DEADLINE_MS }).call("tagged", outcomes.failed[i]!.tag, CALL_MS).then((v) => ({ ...v, tag: i })));
    retried.markKill();
    const second2 = account(await retried.settled(), DEADLINE_MS);
    assert.deepEqual(second2.failed.map((o) => String(o.error)), [], "every retry answered");
    const answeredTags = [...outcomes.answered.map((o) => o.tag), ...second2.answered.map((o) => outcomes.failed[o.tag]!.tag)].sort((a, b) => a - b);
    assert.deepEqual(answeredTags, Array.from({ length: CALLS }, (_, i) => i), "every call answered exactly once");
    assert.equal(again.duplicateReplies, 0, "no call answered twice");
    const runs = (await pool2.withOptions({ timeoutMs: 10_000 }).broadcastMembers("executions")).flatMap((m) => m.result.tags);
    const ranTwice = runs.length - new Set(runs).size;
    report("head", {
      calls: CALLS, "answered before the crash": outcomes.answered.length, "failed retryable (HeadRestartedError)": outcomes.failed.length,
      "retried and answered": second2.answered.length, "answered twice": 0, "ran twice (at-least-once)": ranTwice,
      "new head listening": `${restartMs} ms after the kill`, "detected by the driver": `${detectedMs} ms after the kill`,
      "last call ended": `${Date.now() - killedAt} ms after the kill`,
    });
  } finally {
    await again?.close().catch(() => undefined);
    await app.close().catch(() => undefined);
    first.proc.kill("SIGKILL");
    second?.proc.kill("SIGTERM");
    agent.kill("SIGTERM");
    await waitForExit("the agent", agent.pid!, 15_000).catch(() => agent.kill("SIGKILL"));
    if (second) await waitForExit("the second head", second.proc.pid!, 15_000).catch(() => second!.proc.kill("SIGKILL"));
  }
});
