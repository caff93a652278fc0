/**
 * Where object bytes live: a head restarted with the same --data-dir keeps
 * its objects; a memory limit evicts least recently used, unpinned objects
 * (spilling them when there is a data dir) and refuses what cannot fit; and
 * 10,000 objects keep the head's file descriptors bounded.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { CacheFullError, ObjectEvictedError } from "../../sdk/errors/index.js";
import { startCluster } from "../helpers/cluster.js";

const MiB = 1024 * 1024;

test("a head restarted with the same --data-dir keeps objects, versions and patches", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-data-"));
  const first = await startCluster({ agents: [], headArgs: ["--data-dir", dataDir] });
  const big = Buffer.alloc(6 * MiB);
  for (let i = 0; i < big.length; i += 997) big[i] = (i / 997) % 256;
  let app: App | undefined;
  try {
    app = await connect({ name: "persist", head: first.endpoint });
    await app.objects.put({ hello: "world" }, { key: "doc" });
    const log = await app.objects.put([1], { key: "log" });
    await app.objects.patch(log, [2]);
    await app.objects.patch(log, [3]);
    await app.objects.put(big, { key: "big" });
    await app.objects.put(Float32Array.from([0.5, 1.5]), { key: "typed" });
    const gone = await app.objects.put("temporary", { key: "tmp" });
    await app.objects.delete(gone.key);
  } finally {
    await app?.disconnect().catch(() => undefined);
    await first.stop();
  }
  const second = await startCluster({ agents: [], headArgs: ["--data-dir", dataDir] });
  let again: App | undefined;
  try {
    again = await connect({ name: "persist", head: second.endpoint });
    const app = again;
    assert.deepEqual(await app.objects.get("doc"), { hello: "world" });
    assert.deepEqual(await app.objects.get("log"), [1, 2, 3]);
    assert.equal(app.objects.heldVersion("log"), 3);
    assert.ok((await app.objects.get<Buffer>("big")).equals(big));
    assert.deepEqual([...(await app.objects.get<Float32Array>("typed"))], [0.5, 1.5]);
    await assert.rejects(app.objects.get("tmp"), /no object 'tmp'/);
    const next = await app.objects.patch("log", [4]);
    assert.equal(next.version, 4, "versions continue after the restart");
  } finally {
    await again?.close().catch(() => undefined);
    await second.stop();
  }
});

test("a memory limit evicts unpinned objects in LRU order and refuses what cannot fit", async () => {
  const cluster = await startCluster({ agents: [], headArgs: ["--mem-limit", "4m"] });
  let app: App | undefined;
  try {
    app = await connect({ name: "evict", head: cluster.endpoint });
    const pinned = await app.objects.put(Buffer.alloc(1 * MiB, 1), { key: "pinned", pin: true });
    const a = await app.objects.put(Buffer.alloc(1 * MiB, 2), { key: "a" });
    const b = await app.objects.put(Buffer.alloc(1 * MiB, 3), { key: "b" });
    await app.objects.get(a); // a is now more recently used than b
    await app.objects.put(Buffer.alloc(1.5 * MiB, 4), { key: "c" }); // needs room: b goes
    await assert.rejects(app.objects.get(b), (e: unknown) => e instanceof ObjectEvictedError && e.key === "b" && /evicted: the cache needed room \(limit 4 MiB\).*no --data-dir; pin/.test(e.message));
    assert.equal((await app.objects.get<Buffer>(pinned))[0], 1, "pinned objects stay");
    await assert.rejects(app.objects.put(Buffer.alloc(5 * MiB), { key: "huge" }), (e: unknown) => {
      assert.ok(e instanceof CacheFullError, String(e));
      assert.match(e.message, /larger than the cache's memory limit of 4 MiB/);
      assert.deepEqual([e.key, e.size, e.limit], ["huge", 5 * MiB, 4 * MiB]);
      assert.equal(e.app, "evict");
      return true;
    });
    await app.objects.put(Buffer.alloc(2.5 * MiB, 5), { key: "p2", pin: true });
    await assert.rejects(app.objects.put(Buffer.alloc(1 * MiB)), (e: unknown) => e instanceof CacheFullError && /pinned or in-transfer/.test(e.message));
    const st = await cluster.status();
    assert.ok(st.objects.memUsed <= 4 * MiB);
    assert.ok(st.objects.evictions >= 2);
  } finally {
    await app?.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("with a data dir, evicted objects spill to disk and reload on get", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-spill-"));
  const cluster = await startCluster({ agents: [], headArgs: ["--mem-limit", "3m", "--data-dir", dataDir] });
  let app: App | undefined;
  try {
    app = await connect({ name: "spill", head: cluster.endpoint });
    for (let i = 0; i < 6; i++) await app.objects.put(Buffer.alloc(1 * MiB, i), { key: `o${i}` });
    for (let i = 0; i < 6; i++) assert.equal((await app.objects.get<Buffer>(`o${i}`))[0], i);
    const st = await cluster.status();
    assert.ok(st.objects.spills > 0 && st.objects.reloads > 0, JSON.stringify(st.objects));
    assert.ok(st.objects.memUsed <= 3 * MiB);
  } finally {
    await app?.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("10,000 objects keep the head's file descriptors bounded", async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-fds-"));
  const cluster = await startCluster({ agents: [], headArgs: ["--data-dir", dataDir] });
  let many: App | undefined;
  try {
    const fds = (): number => readdirSync(`/proc/${cluster.head.pid}/fd`).length;
    const app = (many = await connect({ name: "many", head: cluster.endpoint }));
    const before = fds();
    for (let batch = 0; batch < 50; batch++) {
      await Promise.all(Array.from({ length: 200 }, (_, i) => app.objects.put({ i: batch * 200 + i }, { key: `k/${batch * 200 + i}` })));
    }
    const refs = await Promise.all(Array.from({ length: 200 }, (_, i) => app.objects.get<{ i: number }>(`k/${i * 50}`)));
    assert.deepEqual(refs.map((r) => r.i), Array.from({ length: 200 }, (_, i) => i * 50));
    const after = fds();
    assert.ok(after - before < 16, `fds grew from ${before} to ${after}`);
    assert.equal((await cluster.status()).objects.objects, 10_000);
    assert.equal(await app.objects.delete("k/"), 10_000);
  } finally {
    await many?.close().catch(() => undefined);
    await cluster.stop();
  }
});
