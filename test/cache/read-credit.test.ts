/**
 * A head bounds the object data one connection holds unread (its outbox for
 * that peer): with `--max-unread 32m`, a driver that requests 8 MiB chunks
 * and never acknowledges reading them is sent 4, and its other requests wait
 * until it hands tokens back; the SDK, which acknowledges as it reads, gets
 * objects far larger than the limit, directly and through an agent's node
 * cache into an executor.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { credentialFrom, loadSecret, secretFile } from "../../sdk/wire/auth.js";
import { FIXTURES, startCluster, type TestCluster } from "../helpers/cluster.js";
import type { ObjectUser } from "../fixtures/services.js";

const MiB = 1024 * 1024;
let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "4g" }], headArgs: ["--max-unread", "32m"] });
  app = await connect({ name: "credit", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

function pattern(size: number): Buffer {
  const b = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i += 4) b.writeUInt32LE(i >>> 2, i);
  return b;
}

test("a driver that reads but never acknowledges is sent 32 MiB of chunks; the rest wait for its tokens", async () => {
  const data = pattern(64 * MiB);
  await app.objects.put(data, { key: "big" });
  const secret = loadSecret(secretFile());
  const { client } = await HeadClient.open(cluster.endpoint, { app: "credit" }, { credential: credentialFrom(secret, "driver", "credit", "credit") });
  try {
    const opened = (await client.request("obj-get", { key: "big" })).value as { tid: number };
    const settled: number[] = [];
    const reads = Array.from({ length: 8 }, (_, i) =>
      client.request("obj-read", { tid: opened.tid, part: 0, offset: i * 8 * MiB, length: 8 * MiB }, [], 60_000).then((r) => (settled.push(i), r)),
    );
    // The head takes requests in order on one connection: by the time this reply arrives, every read was admitted or set waiting.
    const stat = (await client.request("obj-stat")).value as { credit: { waited: number } };
    assert.equal(stat.credit.waited, 4, "the reads past 32 MiB wait");
    const first = await Promise.all(reads.slice(0, 4));
    // The other four cannot be answered before tokens come back, which none has yet.
    assert.deepEqual(settled.sort(), [0, 1, 2, 3], "exactly 4 chunks of 8 MiB were sent");
    for (const [i, r] of first.entries()) assert.ok(r.frames[0]!.equals(data.subarray(i * 8 * MiB, (i + 1) * 8 * MiB)), `chunk ${i} is the object's bytes`);
    // Handing back two tokens lets exactly two more go.
    await client.request("obj-ack", { acks: first.slice(0, 2).map((r) => (r.value as { ack: number }).ack) });
    await Promise.all(reads.slice(4, 6));
    const again = (await client.request("obj-stat")).value as { credit: { waited: number } };
    assert.equal(again.credit.waited, 4);
    assert.deepEqual([...settled].sort(), [0, 1, 2, 3, 4, 5], "the last two still wait");
    await client.request("obj-ack", { acks: (await Promise.all(reads.slice(2, 6))).map((r) => (r.value as { ack: number }).ack) });
    const last = await Promise.all(reads.slice(6));
    assert.ok(last[1]!.frames[0]!.equals(data.subarray(56 * MiB)), "the last chunk arrives whole once the reader caught up");
    await client.request("obj-done", { tid: opened.tid });
  } finally {
    client.close();
  }
});

test("the SDK acknowledges as it reads: a 96 MiB object arrives whole through a 32 MiB limit, in the driver and through the node cache", async () => {
  const data = pattern(96 * MiB);
  const ref = await app.objects.put(data, { key: "bigger" });
  const got = await app.objects.get<Buffer>(ref);
  assert.ok(got.equals(data), "the driver's copy is exact");
  const users = await app.service<ObjectUser>({ module: FIXTURES, export: "ObjectUser" }, { name: "users", resreq: "cpu=1", warmup: 1, max: 1 });
  let sum = 0;
  for (let i = 0; i < data.length; i += 4096) sum = (sum + data[i]!) % 1_000_003;
  const seen = await users.call("digest", ref);
  assert.deepEqual([seen.size, seen.sum], [data.length, sum], "the executor read it through its agent, whose fetch from the head acknowledged every chunk");
  await users.stop();
});
