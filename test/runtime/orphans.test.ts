/**
 * No orphans, on real processes killed with SIGKILL: an executor busy in
 * synchronous code exits when its agent dies (and the call pending on the
 * only agent ends with a clear error); an agent exits when its head is gone
 * past its grace period; `hearth down` stops what `hearth up` started even
 * after the head crashed; an agent survives an executor log it cannot open.
 * Every wait polls with a deadline.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { connect } from "../../sdk/connect.js";
import { ExecutorLostError } from "../../sdk/errors/index.js";
import { CLI, LIVENESS, executorsOf, pidAlive, rejection, startCluster, waitFor, waitForExit } from "../helpers/cluster.js";
import type { Sleeper } from "../helpers/liveness-services.js";
import { RawClient } from "../helpers/raw-client.js";

const run = promisify(execFile);

test("kill -9 of the only agent: its executor exits though busy in synchronous code, and the pending call ends with ExecutorLostError", async () => {
  const cluster = await startCluster({ agents: [{ id: "only", cpus: 2, mem: "4g" }], headArgs: ["--agent-timeout", "1s"] });
  const app = await connect({ name: "orphans", head: cluster.endpoint });
  try {
    const pool = await app.service<Sleeper>({ module: LIVENESS, export: "Sleeper" }, { name: "spin", warmup: 1, max: 1 });
    const { pid } = await pool.call("whoami");
    const pending = pool.call("spin", 20_000);
    await waitFor("the call to be running", async () => (executorsOf(await cluster.status(), "orphans", "spin")[0]?.inflight === 1 ? true : undefined));
    const ended = rejection(pending);
    cluster.agents.get("only")!.kill("SIGKILL");
    await waitForExit("the busy executor of the dead agent", pid, 5000);
    const { error, ms } = await ended;
    assert.ok(error instanceof ExecutorLostError, String(error));
    assert.match(error.message, /no agent can run service 'spin' \(no agent is registered/);
    assert.equal(error.service, "spin");
    assert.equal(typeof error.callId, "number");
    assert.ok(ms < 10_000, `ended ${ms} ms after the agent died`);
  } finally {
    await app.close();
    await cluster.stop();
  }
});

test("an agent whose head is gone past --head-grace exits and stops its executors", async () => {
  const cluster = await startCluster({ agents: [{ id: "graceful", cpus: 2, mem: "4g", args: ["--head-grace", "1s"] }] });
  const agent = cluster.agents.get("graceful")!;
  const raw = new RawClient(cluster.endpoint);
  try {
    await raw.request("hello", { app: "grace" });
    const info = await raw.request("service", { spec: { name: "warm", module: LIVENESS, export: "Sleeper", warmup: 1, max: 1 } });
    await raw.request("ready", { service: "warm" });
    await raw.call(1, info.id, "whoami", []);
    const { pid } = (await raw.waitFor((m) => m.header.cid === 1)).payload as { pid: number };
    cluster.head.kill("SIGKILL");
    await waitForExit("the agent of the dead head", agent.pid!, 8000);
    await waitForExit("the agent's executor", pid, 5000);
    assert.match(cluster.headLog(), /nothing heard from the head .* \(grace 1 s\); stopping executors and exiting/);
  } finally {
    await raw.close();
    await cluster.stop();
  }
});

test("`hearth down` stops the agent `hearth up` started even after the head crashed", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "hearth-down-"));
  const env: NodeJS.ProcessEnv = { ...process.env, HEARTH_HOME: home };
  delete env.HEARTH_HEAD;
  let pids: number[] = [];
  try {
    await run(process.execPath, [CLI, "up", "--cpus", "1", "--mem", "1g"], { env, timeout: 60_000 });
    const state = JSON.parse(readFileSync(path.join(home, "local.json"), "utf8")) as { headPid: number; agentPid: number };
    pids = [state.headPid, state.agentPid];
    process.kill(state.headPid, "SIGKILL");
    await waitForExit("the crashed head", state.headPid, 5000);
    assert.ok(pidAlive(state.agentPid), "the agent outlives the head for its grace period");
    const { stdout } = await run(process.execPath, [CLI, "down"], { env, timeout: 60_000 });
    assert.match(stdout, /stopped the local head and agent/);
    await waitForExit("the agent after `hearth down`", state.agentPid, 5000);
    assert.equal(existsSync(path.join(home, "processes.json")), false, "the record is removed once they are stopped");
  } finally {
    for (const pid of pids) if (pidAlive(pid)) process.kill(pid, "SIGKILL");
  }
});

test("an agent survives an executor log it cannot open, and the executor still serves", async () => {
  const cluster = await startCluster({ agents: [{ id: "nolog", cpus: 1, mem: "2g" }] });
  const app = await connect({ name: "nolog", head: cluster.endpoint });
  try {
    // The head numbers executors from x000001: make that log path a directory, so opening it fails (EISDIR).
    mkdirSync(path.join(cluster.dir, "nolog", "logs", "x000001.log"), { recursive: true });
    const pool = await app.service<Sleeper>({ module: LIVENESS, export: "Sleeper" }, { name: "s", warmup: 1, max: 1 });
    const me = await pool.call("whoami");
    assert.equal(me.executorId, "x000001");
    assert.equal((await pool.call("whoami")).pid, me.pid);
    assert.ok(pidAlive(cluster.agents.get("nolog")!.pid!), "the agent is still running");
    assert.match(cluster.headLog(), /executor x000001: cannot write its log .*x000001\.log \(EISDIR/);
  } finally {
    await app.close();
    await cluster.stop();
  }
});
