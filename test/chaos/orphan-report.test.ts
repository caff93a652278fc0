/**
 * An executor's report that its agent is gone (`orphaned`) only shortens how
 * long the head waits for that agent's heartbeats: an agent that keeps
 * heartbeating stays registered, so a wrong (or forged) report costs nothing.
 * A fake agent and a fake executor on real head, so the report and the
 * heartbeats are ours to send; the real path (kill -9 of an agent) is in
 * kill-agent.test.ts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { pack } from "msgpackr";
import { LIVENESS, startCluster, waitFor } from "../helpers/cluster.js";
import { RawClient, rawCredential } from "../helpers/raw-client.js";

/** Longer than the head's SUSPECT_AGENT_TIMEOUT_MS (2.5 s): a report taken on its word would have ended the agent by then. */
const WATCH_MS = 4_000;

test("a heartbeating agent that one of its executors reports gone stays registered", { timeout: 60_000 }, async () => {
  const cluster = await startCluster({ agents: [] });
  const agent = new RawClient(cluster.endpoint, "a.alive", rawCredential("agent", "alive"));
  const driver = new RawClient(cluster.endpoint);
  let executor: RawClient | undefined;
  const beat = setInterval(() => void agent.sendFrames([pack({ t: "hb" })]), 300);
  try {
    await driver.request("hello", { app: "orphan-report" });
    const info = await driver.request("service", { spec: { name: "r", module: LIVENESS, export: "Sleeper", warmup: 1, max: 1, elastic: true } });
    await agent.sendFrames([pack({ t: "register", host: "127.0.0.1", pid: process.pid, cpu: 1, mem: 1e9, gpus: [], labels: { "hearth.service": info.id } })]);
    const start = await agent.waitFor((m) => m.header.t === "start");
    executor = new RawClient(cluster.endpoint, `x.${start.header.executor}`, rawCredential("executor", start.header.executor, "orphan-report"));
    await executor.sendFrames([pack({ t: "ready", pid: process.pid, methods: ["sleep"] })]);
    await driver.request("ready", { service: "r" });
    await executor.sendFrames([pack({ t: "orphaned" })]);
    await waitFor("the head to note the report", () => (/reports its agent alive gone/.test(cluster.headLog()) ? true : undefined), 5000);
    const reportedAt = Date.now();
    await new Promise((r) => setTimeout(r, WATCH_MS)); // a window in which nothing may happen
    const st = await cluster.status();
    assert.ok(st.agents.some((a: any) => a.id === "alive"), `the agent was dropped ${Date.now() - reportedAt} ms after the report though it heartbeat`);
    assert.doesNotMatch(cluster.headLog(), /agent alive lost/);
    await driver.request("close-app");
  } finally {
    clearInterval(beat);
    for (const c of [driver, agent, executor]) await c?.close();
    await cluster.stop();
  }
});
