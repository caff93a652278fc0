/**
 * Exactly what is promised, against a real head with independent raw
 * clients: a replayed call id runs once; a result that arrives after its
 * executor's exit report is accepted, not re-run; a call whose executor
 * really died mid-call (no result) runs again on a replacement.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { pack } from "msgpackr";
import { LIVENESS, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { RawClient, rawCredential } from "../helpers/raw-client.js";

let cluster: TestCluster;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "4g" }] });
});

after(async () => {
  await cluster?.stop();
});

test("a replayed call id runs once and is answered once", async () => {
  const raw = new RawClient(cluster.endpoint);
  try {
    await raw.request("hello", { app: "replay" });
    const info = await raw.request("service", { spec: { name: "s", module: LIVENESS, export: "Sleeper", warmup: 1, max: 1 } });
    await raw.request("ready", { service: "s" });
    await raw.call(1, info.id, "sleep", [300]);
    await raw.call(1, info.id, "sleep", [300]); // replayed while in flight
    await raw.waitFor((m) => m.header.cid === 1);
    await raw.call(1, info.id, "sleep", [300]); // replayed after its answer
    await raw.call(2, info.id, "whoami", []);
    const me = (await raw.waitFor((m) => m.header.cid === 2)).payload as { calls: number };
    assert.equal(me.calls, 1, "sleep ran once");
    assert.equal(raw.answersTo(1).length, 1, "answered once");
    assert.equal((await cluster.status()).head.calls.replays, 2);
    await raw.request("close-app");
  } finally {
    await raw.close();
  }
});

test("a result that races its executor's exit report is accepted; a call with no result runs again", async () => {
  // A fake agent and fake executors, so the order of the exit report and the result is ours to choose.
  const agent = new RawClient(cluster.endpoint, "a.fake", rawCredential("agent", "fake"));
  const driver = new RawClient(cluster.endpoint);
  const executors: RawClient[] = [];
  try {
    await driver.request("hello", { app: "race" });
    // Elastic: it runs only on an agent labelled with its id, so the fake agent is the only one that hosts it.
    const info = await driver.request("service", { spec: { name: "r", module: LIVENESS, export: "Sleeper", warmup: 1, max: 1, concurrency: 2, elastic: true } });
    await agent.sendFrames([pack({ t: "register", host: "127.0.0.1", pid: process.pid, cpu: 1, mem: 1e9, gpus: [], labels: { "hearth.service": info.id } })]);
    const start = await agent.waitFor((m) => m.header.t === "start");
    const first = new RawClient(cluster.endpoint, `x.${start.header.executor}`, rawCredential("executor", start.header.executor, "race"));
    executors.push(first);
    await first.sendFrames([pack({ t: "ready", pid: process.pid, methods: ["sleep"] })]);
    await driver.request("ready", { service: "r" });
    await driver.call(1, info.id, "sleep", [0]);
    await driver.call(2, info.id, "sleep", [0]);
    const calls = await waitFor("both calls at the executor", () => {
      const got = first.received.filter((m) => m.header.t === "call");
      return got.length === 2 ? got : undefined;
    });
    // The exit report overtakes the result of the first call; the second call gets no result (it really died).
    await agent.sendFrames([pack({ t: "exit", executor: start.header.executor, code: 0, signal: null, detail: "" })]);
    // The head has handled the exit once it starts a replacement; only then does the result leave.
    const restart = await agent.waitFor((m) => m.header.t === "start" && m.header.executor !== start.header.executor);
    await first.sendFrames([pack({ t: "result", hid: calls[0]!.header.hid }), pack("from the dead executor")]);
    const answer1 = await driver.waitFor((m) => m.header.cid === 1);
    assert.equal(answer1.header.t, "result");
    assert.equal(answer1.payload, "from the dead executor");
    // The second call is re-run on the replacement once the grace for late results is over.
    const second = new RawClient(cluster.endpoint, `x.${restart.header.executor}`, rawCredential("executor", restart.header.executor, "race"));
    executors.push(second);
    await second.sendFrames([pack({ t: "ready", pid: process.pid, methods: ["sleep"] })]);
    const rerun = await second.waitFor((m) => m.header.t === "call");
    assert.equal(rerun.header.hid, calls[1]!.header.hid, "only the call without a result runs again");
    await second.sendFrames([pack({ t: "result", hid: rerun.header.hid }), pack("rerun")]);
    const answer2 = await driver.waitFor((m) => m.header.cid === 2);
    assert.equal(answer2.payload, "rerun");
    assert.equal(second.received.filter((m) => m.header.t === "call").length, 1);
    assert.equal(driver.answersTo(1).length, 1);
    assert.equal(driver.answersTo(2).length, 1);
    const stats = (await cluster.status()).head.calls;
    assert.equal(stats.retried, 1);
    await driver.request("close-app");
  } finally {
    for (const c of [driver, agent, ...executors]) await c.close();
  }
});
