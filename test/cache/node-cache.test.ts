/**
 * The node cache serves its executors concurrently (real head, agent and
 * executors; a relay between agent and head holds a large fetch in flight):
 * a 64 MiB miss being fetched from the head does not hold up another
 * executor's get of a small cached object, and concurrent gets of one object
 * on one node cost one head fetch.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { FIXTURES, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { startStallRelay, type StallRelay } from "../helpers/stall-relay.js";
import type { ObjectUser } from "../fixtures/services.js";

const MiB = 1024 * 1024;

let cluster: TestCluster;
let relay: StallRelay;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [] });
  relay = await startStallRelay(cluster.endpoint);
  await cluster.addAgent({ id: "n1", cpus: 6, mem: "8g", head: relay.endpoint });
  app = await connect({ name: "node-cache", head: cluster.endpoint });
});

after(async () => {
  relay?.release();
  await app?.close();
  await cluster?.stop();
  await relay?.close();
});

/** `p`, or a rejection naming `what` after `ms`. */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms)));
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

test("a hit for one executor completes while another executor's 64 MiB miss is held in flight", async (t) => {
  const pool = await app.service<ObjectUser>({ module: FIXTURES, export: "ObjectUser" }, { name: "hit", warmup: 2, max: 2, concurrency: 1 });
  const small = await app.objects.put(Buffer.alloc(1000, 7), { key: "small" });
  const big = await app.objects.put(Buffer.alloc(64 * MiB, 1), { key: "big" });
  assert.equal((await pool.call("digest", small)).size, 1000, "the small object is now cached on the node");

  relay.arm(4 * MiB);
  t.after(() => relay.release()); // a failure below must not leave the link held for the next test
  const bigCall = pool.call("digest", big);
  await within(relay.stalled(), 20_000, "the 64 MiB fetch reaching the relay");
  // The miss is in flight (part of it crossed, the rest is held): the other executor's hit must still be answered.
  const hit = await within(pool.call("digest", small), 10_000, "a small cached get while a 64 MiB fetch is in flight");
  assert.equal(hit.size, 1000);
  assert.ok(relay.isStalled(), "the hit was answered while the big fetch was still held");
  relay.release();
  const got = await within(bigCall, 20_000, "the 64 MiB get after the relay let go");
  assert.equal(got.size, 64 * MiB);
  assert.notEqual(got.executorId, hit.executorId, "two executors asked");
});

test("two executors' concurrent gets of one object cost one head fetch", async (t) => {
  const pool = await app.service<ObjectUser>({ module: FIXTURES, export: "ObjectUser" }, { name: "flight", warmup: 3, max: 3, concurrency: 1 });
  const ref = await app.objects.put(Buffer.alloc(16 * MiB, 3), { key: "shared" });
  const before = (await cluster.status()).objects.traffic.gets.full as number;

  relay.arm(4 * MiB);
  t.after(() => relay.release());
  const first = pool.call("digest", ref);
  await within(relay.stalled(), 20_000, "the first fetch reaching the relay");
  const s0 = await pool.call("nodeCacheFetches");
  const second = pool.call("digest", ref);
  // The third executor reads the node cache's counters: the second get has reached it while the first is held.
  await waitFor("the second get to reach the node cache", async () => ((await pool.call("nodeCacheFetches")).gets > s0.gets ? true : undefined), 10_000);
  relay.release();
  const [a, b] = await within(Promise.all([first, second]), 20_000, "both gets after the relay let go");
  assert.deepEqual([a.size, b.size], [16 * MiB, 16 * MiB]);
  assert.notEqual(a.executorId, b.executorId, "two executors asked");
  const after = (await cluster.status()).objects.traffic.gets.full as number;
  assert.equal(after - before, 1, "the head served the object to the node once");
  const s1 = await pool.call("nodeCacheFetches");
  assert.deepEqual([s1.started - s0.started, s1.joined - s0.joined], [0, 1], "the second get waited for the first one's fetch");
});
