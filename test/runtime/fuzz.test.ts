/**
 * Malformed and unexpected frames on the head's socket: each is logged and
 * answered with an error, and the head keeps serving.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { pack } from "msgpackr";
import { startCluster, type TestCluster } from "../helpers/cluster.js";
import { RawClient, rawCredential } from "../helpers/raw-client.js";

let cluster: TestCluster;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "2g" }] });
});

after(async () => {
  await cluster?.stop();
});

/** A seeded generator so a failure can be replayed. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

test("fuzzed frames from drivers, fake agents and fake executors do not crash the head", async () => {
  const rand = rng(12345);
  const shapes: Array<() => Array<Buffer | string>> = [
    () => [randomBytes(Math.floor(rand() * 64))],
    () => [randomBytes(1 + Math.floor(rand() * 2000)), randomBytes(8)],
    () => [pack([1, 2, 3])],
    () => [pack({ t: 42 })],
    () => [pack({ t: "req" })],
    () => [pack({ t: "req", rid: "x", op: "hello" })],
    () => [pack({ t: "req", rid: 7, op: "service", spec: "nope" })],
    () => [pack({ t: "req", rid: 8, op: "no-such-op" })],
    () => [pack({ t: "call", cid: 1, svc: "s1", method: "m" })],
    () => [pack({ t: "call", cid: "a" }), pack([1])],
    () => [pack({ t: "result", hid: 99 }), pack(1)],
    () => [pack({ t: "ready", pid: "no" })],
    () => [pack({ t: "register", cpu: "many" })],
    () => [pack({ t: "exit", executor: 5 })],
    () => [Buffer.alloc(0)],
    () => [pack({ t: "req", rid: 9, op: "hello", app: "../../etc" })],
  ];
  // A driver (admin), an agent and an executor that proved real credentials, and an admin with a default routing id.
  const clients = [
    new RawClient(cluster.endpoint, "d.fuzz"),
    new RawClient(cluster.endpoint, "a.fuzz-agent", rawCredential("agent", "fuzz-agent")),
    new RawClient(cluster.endpoint, "x.fuzz-exec", rawCredential("executor", "fuzz-exec", "fuzz")),
    new RawClient(cluster.endpoint),
  ];
  try {
    let sent = 0;
    for (let i = 0; i < 600; i++) {
      const c = clients[Math.floor(rand() * clients.length)]!;
      await c.sendFrames(shapes[Math.floor(rand() * shapes.length)]!());
      sent++;
    }
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(cluster.head.exitCode, null, "the head is still running");
    const driver = clients[0]!;
    assert.ok(driver.received.some((m) => m.header.t === "err" || (m.header.t === "rep" && m.header.ok === false)), "errors were answered");
    // Still fully functional afterwards.
    const hello = await driver.request("hello", { app: "after-fuzz" });
    assert.equal(hello.app, "after-fuzz");
    const st = await driver.request("status", { all: true });
    assert.ok(st.head.malformed > 0, "malformed messages were counted");
    assert.equal(st.agents.length, 1, "the real agent is still registered and no fake one was");
    assert.ok(sent === 600);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
});
