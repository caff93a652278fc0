/**
 * A driver detects a head restart: kill -9 of the head with a call pending
 * and a new head on the same port. The new head's instance id (in its
 * heartbeat replies) differs, so the pending call ends with the retryable
 * HeadRestartedError well within its deadline, later calls on the old
 * connection fail at once, and a fresh connect() works.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { HeadRestartedError } from "../../sdk/errors/index.js";
import { CLI, LIVENESS, rejection, waitFor, waitForExit } from "../helpers/cluster.js";
import type { Sleeper } from "../helpers/liveness-services.js";

function startHead(bind: string): { proc: ChildProcess; endpoint: Promise<string> } {
  const proc = spawn(process.execPath, [CLI, "head", "--bind", bind], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  return { proc, endpoint: waitFor("the head's endpoint", () => /listening on (tcp:\/\/\S+)/.exec(out)?.[1], 20_000) };
}

test("kill -9 of the head and a restart on the same port: the pending call ends with HeadRestartedError within its deadline", async () => {
  const first = startHead("tcp://127.0.0.1:0");
  const endpoint = await first.endpoint;
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-restart-"));
  const agent = spawn(process.execPath, [CLI, "agent", "--head", endpoint, "--id", "r1", "--cpus", "2", "--mem", "4g", "--gpus", "0", "--work-dir", dir], { stdio: "ignore" });
  let second: ReturnType<typeof startHead> | undefined;
  const app = await connect({ name: "restart", head: endpoint });
  try {
    await waitFor("the agent to register", async () => ((await app.status()).agents.length > 0 ? true : undefined));
    const pool = await app.service<Sleeper>({ module: LIVENESS, export: "Sleeper" }, { name: "slow", warmup: 1, max: 1 });
    const deadlineMs = 20_000;
    const pending = pool.withOptions({ timeoutMs: deadlineMs }).call("sleep", 60_000);
    await waitFor("the call to be running", async () => {
      const st = await app.status();
      return st.apps.find((a) => a.name === "restart")?.services[0]?.inflight === 1 ? true : undefined;
    });
    const ended = rejection(pending); // observed from now on: it may settle while the new head starts
    first.proc.kill("SIGKILL");
    await waitForExit("the first head", first.proc.pid!, 5000);
    second = startHead(endpoint);
    assert.equal(await second.endpoint, endpoint);
    const { error, ms } = await ended;
    assert.ok(error instanceof HeadRestartedError, String(error));
    assert.equal(error.retryable, true);
    assert.notEqual(error.oldHeadId, error.newHeadId);
    assert.match(error.message, /restarted .*1 pending call.*connect\(\) again/);
    assert.ok(ms < deadlineMs, `ended ${ms} ms after the kill, deadline ${deadlineMs} ms`);
    const later = await rejection(pool.call("whoami"));
    assert.ok(later.error instanceof HeadRestartedError, "the old connection refuses new work at once");
    await app.disconnect().catch(() => undefined); // refused (restarted), but closes the socket

    const again = await connect({ name: "restart", head: endpoint });
    try {
      assert.equal(again.reattached, false, "the new head has no state of the old one");
      // The agent re-registers on its own, on its next exchange with the new head (this driver may be quicker).
      await waitFor("the agent to re-register", async () => ((await again.status()).agents.length > 0 ? true : undefined), 10_000);
      const fresh = await again.service<Sleeper>({ module: LIVENESS, export: "Sleeper" }, { name: "slow", warmup: 1, max: 1 });
      assert.equal(typeof (await fresh.call("whoami")).pid, "number", "the agent re-registered with the new head");
    } finally {
      await again.close().catch(() => undefined);
    }
  } finally {
    await app.close().catch(() => undefined);
    first.proc.kill("SIGKILL");
    second?.proc.kill("SIGTERM");
    agent.kill("SIGTERM");
    await waitForExit("the agent", agent.pid!, 15_000).catch(() => agent.kill("SIGKILL"));
    if (second) await waitForExit("the second head", second.proc.pid!, 15_000).catch(() => second!.proc.kill("SIGKILL"));
  }
});
