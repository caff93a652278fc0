/**
 * The object cache through a real head: round trips for every value kind,
 * incremental gets (asserting what travelled), compare-and-swap, refs in
 * calls, and node-local caching (the head sends a version to a node once).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { VersionConflictError, ObjectNotFoundError } from "../../sdk/errors/index.js";
import { FIXTURES, startCluster, type TestCluster } from "../helpers/cluster.js";
import type { ObjectUser } from "../fixtures/services.js";

let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "8g" }] });
  app = await connect({ name: "objects", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("put/get/update/patch/delete round trip raw bytes, typed arrays and structured values", async () => {
  const bytes = Buffer.from("hello bytes");
  const r1 = await app.objects.put(bytes, { key: "kinds/bytes" });
  assert.deepEqual([r1.key, r1.version, r1.size], ["kinds/bytes", 1, bytes.length]);
  const gotBytes = await app.objects.get<Buffer>(r1);
  assert.ok(Buffer.isBuffer(gotBytes));
  assert.equal(gotBytes.toString(), "hello bytes");

  const f32 = Float32Array.from([1.5, -2.25, 3e-8]);
  const r2 = await app.objects.put(f32, { key: "kinds/f32" });
  const gotF32 = await app.objects.get<Float32Array>(r2);
  assert.ok(gotF32 instanceof Float32Array);
  assert.deepEqual([...gotF32], [...f32]);
  const big = BigInt64Array.from([1n, -(2n ** 62n)]);
  assert.deepEqual([...(await app.objects.get<BigInt64Array>(await app.objects.put(big)))], [...big]);

  const doc = { step: 3, rows: [{ q: "who?", r: 1 }], nested: { ok: true, none: null } };
  const r3 = await app.objects.put(doc, { key: "kinds/doc" });
  assert.deepEqual(await app.objects.get(r3), doc);

  const r4 = await app.objects.update(r3, { step: 4 });
  assert.equal(r4.version, 2);
  assert.deepEqual(await app.objects.get(r3), { step: 4 });

  const log = await app.objects.put([1, 2], { key: "kinds/log" });
  const p1 = await app.objects.patch(log, [3]);
  const p2 = await app.objects.patch(log, [4, 5]);
  assert.deepEqual([p1.version, p2.version], [2, 3]);
  assert.deepEqual(await app.objects.get(log), [1, 2, 3, 4, 5], "arrays fold by concatenation by default");
  const reset = await app.objects.update(log, [9]);
  assert.equal(reset.version, 4, "update keeps the version monotonic");
  assert.deepEqual(await app.objects.get(log), [9], "update clears patches");

  assert.equal(await app.objects.delete("kinds/"), 4);
  await assert.rejects(app.objects.get("kinds/doc"), ObjectNotFoundError);
});

test("incremental get: not-modified, only the new patches, or the full object — asserting the bytes that travelled", async () => {
  const reader = app.objects;
  const base = Buffer.alloc(200_000, 1);
  const ref = await app.objects.put(base, { key: "weights" });
  const fold = (acc: Buffer, patches: unknown[]): Buffer => Buffer.concat([acc, ...(patches as Buffer[])]);
  const s0 = { ...reader.stats };
  assert.equal((await reader.get(ref, { fold })).length, 200_000);
  assert.equal(reader.stats.full - s0.full, 1);
  assert.equal(reader.stats.bytesReceived - s0.bytesReceived, 200_000);

  await reader.get(ref, { fold });
  assert.equal(reader.stats.notModified - s0.notModified, 1);
  assert.equal(reader.stats.bytesReceived - s0.bytesReceived, 200_000, "not-modified moves no bytes");

  await app.objects.patch(ref, Buffer.alloc(1000, 2));
  await app.objects.patch(ref, Buffer.alloc(500, 3));
  const v = await reader.get(ref, { fold });
  assert.equal(v.length, 201_500);
  assert.equal(reader.stats.patches - s0.patches, 1);
  assert.equal(reader.stats.bytesReceived - s0.bytesReceived, 201_500, "only the two new patches travelled");

  await app.objects.update(ref, Buffer.alloc(10, 7));
  const replaced = await reader.get(ref, { fold });
  assert.deepEqual([...replaced], Array(10).fill(7));
  assert.equal(reader.stats.full - s0.full, 2, "a new base means a full response");
});

test("ifVersion: a stale write fails with VersionConflictError and loses nothing", async () => {
  const ref = await app.objects.put({ n: 1 }, { key: "cas" });
  const a = await app.objects.update(ref, { n: 2 }, { ifVersion: 1 });
  assert.equal(a.version, 2);
  await assert.rejects(app.objects.update(ref, { n: 99 }, { ifVersion: 1 }), (e: unknown) => {
    assert.ok(e instanceof VersionConflictError);
    assert.equal(e.expected, 1);
    assert.equal(e.actual, 2);
    assert.match(e.message, /expected version 1 but it is at 2/);
    return true;
  });
  await assert.rejects(app.objects.patch(ref, { n: 99 }, { ifVersion: 5 }), VersionConflictError);
  assert.deepEqual(await app.objects.get(ref), { n: 2 });
  await assert.rejects(app.objects.put({}, { key: "cas" }), /already exists at version 2; use update/);
});

test("refs pass in call arguments and results; two executors on one agent fetch 64 MiB and the head sends it once", async () => {
  const pool = await app.service<ObjectUser>({ module: FIXTURES, export: "ObjectUser" }, { warmup: 2, max: 2, concurrency: 1 });
  const data = Buffer.alloc(64 * 1024 * 1024);
  for (let i = 0; i < data.length; i += 4096) data[i] = i % 251;
  let expectSum = 0;
  for (let i = 0; i < data.length; i += 4096) expectSum = (expectSum + data[i]!) % 1_000_003;
  const ref = await app.objects.put(data, { key: "big" });
  const before = (await cluster.status()).objects.traffic;
  const [a, b] = await Promise.all([pool.call("digest", ref), pool.call("digest", ref)]);
  assert.notEqual(a.executorId, b.executorId, "both executors fetched");
  for (const r of [a, b]) assert.deepEqual([r.size, r.sum, r.version], [data.length, expectSum, 1]);
  const afterFirst = (await cluster.status()).objects.traffic;
  const sentToAgents = (afterFirst.bytesOutTo.agent ?? 0) - (before.bytesOutTo.agent ?? 0);
  assert.equal(sentToAgents, data.length, "one copy crossed from the head to the node");
  assert.equal(afterFirst.bytesOutTo.executor ?? 0, before.bytesOutTo.executor ?? 0, "executors read from their agent, not the head");

  // A result can be a ref made inside the executor.
  const made = (await pool.call("make", [1, 2, 3])) as { key: string; version: number };
  assert.equal(made.version, 1);
  assert.deepEqual([...(await app.objects.get<Float64Array>(made.key))], [1, 2, 3]);
});
