/**
 * Scratch objects and deletes in the head's store: releasing an app deletes
 * its scratch objects only (what it documents stays), the mark survives a
 * head restart on the same data dir, a delete leaves a reader in flight its
 * bytes, and the per-prefix summary counts what status shows.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { ObjectStore } from "../../cluster-agent/head/object-store.js";
import { ObjectService } from "../../cluster-agent/object-service.js";

const bytes = (n: number, fill = 1) => ({ kind: "bytes" as const, data: Buffer.alloc(n, fill) });

test("releasing an app deletes its scratch objects and keeps the rest; node caches are told", async () => {
  const dropped: Array<[string, string]> = [];
  const svc = new ObjectService(new ObjectStore({ memLimit: 1 << 20 }), { onDropped: (ns, prefix) => dropped.push([ns, prefix]) });
  await svc.store.write("put", "a/weights", bytes(100));
  await svc.store.write("put", "a/steps/1/traj-x", bytes(50), { scratch: true });
  await svc.store.write("put", "a/steps/2/traj-y", bytes(50), { scratch: true });
  // An update keeps the mark it was put with.
  await svc.store.write("update", "a/steps/2/traj-y", bytes(40));
  await svc.store.write("put", "b/steps/1/traj-z", bytes(10), { scratch: true });
  assert.deepEqual(svc.store.summary("a/", 10), { objects: 3, bytes: 190, keys: ["steps/1/traj-x", "steps/2/traj-y", "weights"] });
  assert.deepEqual(svc.store.summary("a/", 1), { objects: 3, bytes: 190, keys: ["steps/1/traj-x"], keysLeftOut: 2 });

  assert.equal(svc.releaseApp("a"), 2);
  assert.deepEqual(svc.store.summary("a/", 10), { objects: 1, bytes: 100, keys: ["weights"] });
  assert.equal(svc.store.summary("b/").objects, 1, "another app's scratch objects stay");
  assert.deepEqual(dropped, [["a", ""]], "node caches drop every copy of the released app's objects");

  const r = (await svc.handle("obj-delete", "b", { t: "req", prefix: "steps/" }, [], "driver")) as { value: { deleted: number } };
  assert.equal(r.value.deleted, 1);
  assert.deepEqual(dropped.at(-1), ["b", "steps/"], "a delete is passed on to the node caches");
  await svc.handle("obj-delete", "b", { t: "req", prefix: "steps/" }, [], "driver");
  assert.equal(dropped.length, 2, "a delete that found nothing is not");
  assert.equal(svc.store.usage().memUsed, 100);
});

test("the scratch mark survives a restart on the same data dir; deletes remove the files", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-scratch-"));
  try {
    const first = new ObjectStore({ memLimit: 1 << 20, dataDir: dir }).open();
    await first.write("put", "a/run", bytes(10));
    await first.write("put", "a/steps/1/slice-0", bytes(10), { scratch: true });
    const second = new ObjectStore({ memLimit: 1 << 20, dataDir: dir }).open();
    assert.equal(second.usage().objects, 2);
    assert.equal(second.delete("a/", { scratchOnly: true }), 1);
    assert.deepEqual(second.summary("a/", 10).keys, ["run"]);
    assert.equal(readdirSync(path.join(dir, "objects")).length, 2, "the deleted object's files are gone (one object: meta and base)");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a delete leaves a reader in flight the bytes it started on, and frees them from the accounting", async () => {
  const store = new ObjectStore({ memLimit: 1 << 20 });
  await store.write("put", "a/steps/3/traj", bytes(1000, 7));
  const inFlight = store.read("a/steps/3/traj");
  assert.ok(inFlight.mode === "full");
  assert.equal(store.delete("a/steps/3/"), 1);
  assert.ok(inFlight.parts[0]!.data?.equals(Buffer.alloc(1000, 7)), "the reader still has its bytes");
  assert.equal(store.usage().memUsed, 0);
  assert.equal(store.usage().objects, 0);
});
