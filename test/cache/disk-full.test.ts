/**
 * A write the head's disk refused leaves no trace: with the head's --data-dir
 * on a real, full tmpfs (ENOSPC) a put, update or patch fails with
 * ObjectStorageError, the object stays as it was (absent, or at its previous
 * version), the same write succeeds once the disk has room, and a head
 * restarted on that data dir agrees with what the driver was told. A delete
 * on a read-only remount (EROFS) fails the same way and deletes nothing.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { ObjectNotFoundError, ObjectStorageError } from "../../sdk/errors/index.js";
import type { App } from "../../sdk/runtime/app.js";
import { rejection, startCluster, type TestCluster } from "../helpers/cluster.js";
import { SmallDisk, smallDiskSupport } from "../helpers/small-disk.js";

const support = smallDiskSupport();
const skip = support.ok ? false : support.reason;
const KiB = 1024;

let disk: SmallDisk | undefined;
let cluster: TestCluster | undefined;
let app: App | undefined;

before(() => {
  if (!skip) disk = SmallDisk.mount(2);
});

after(async () => {
  await app?.close().catch(() => undefined);
  await cluster?.stop();
  disk?.unmount();
});

/** Starts (or restarts) the head on the small disk and connects the driver to it. */
async function restartHead(): Promise<App> {
  await app?.close().catch(() => undefined);
  await cluster?.stop();
  cluster = await startCluster({ agents: [], headArgs: ["--data-dir", path.join(disk!.dir, "data")] });
  app = await connect({ name: "disk", head: cluster.endpoint });
  return app;
}

/** Checks `p` failed because the disk refused `op` of `key` with `code`. */
async function refusedByDisk(p: Promise<unknown>, op: string, key: string, code: string): Promise<void> {
  assertRefused((await rejection(p)).error, op, key, code);
}

function assertRefused(error: Error, op: string, key: string, code: string): void {
  assert.ok(error instanceof ObjectStorageError, `${op}: expected ObjectStorageError, got ${error.name}: ${error.message}`);
  assert.deepEqual([error.op, error.key, error.app, error.code], [op, key, "disk", code]);
  assert.match(error.message, new RegExp(`${op} of '${key}' failed: the head's data dir refused it \\(${code}.*nothing changed, retry`));
}

test("a put, update, patch or delete the disk refused leaves no trace, can be retried, and a restart agrees", { skip }, async () => {
  const v1 = Buffer.alloc(64 * KiB, 1);
  const v2 = Buffer.alloc(48 * KiB, 2);
  const tail = Buffer.alloc(16 * KiB, 3);
  let objects = (await restartHead()).objects;

  disk!.fill();
  const first = await rejection(objects.put(v1, { key: "k" }));
  await assert.rejects(objects.get("k"), ObjectNotFoundError, "the refused put is not visible");
  assertRefused(first.error, "put", "k", "ENOSPC");
  await refusedByDisk(objects.put(v1, { key: "k" }), "put", "k", "ENOSPC");

  objects = (await restartHead()).objects;
  await assert.rejects(objects.get("k"), ObjectNotFoundError, "a restarted head has no trace of the refused put");
  disk!.free();
  const ref = await objects.put(v1, { key: "k" });
  assert.equal(ref.version, 1, "the retried put makes version 1");

  disk!.fill();
  await refusedByDisk(objects.update("k", v2), "update", "k", "ENOSPC");
  await refusedByDisk(objects.patch("k", tail), "patch", "k", "ENOSPC");
  objects.forget("k");
  assert.ok((await objects.get<Buffer>("k")).equals(v1), "the object is still version 1's bytes");
  assert.equal(objects.heldVersion("k"), 1);
  disk!.free();

  disk!.readOnly(true);
  try {
    await refusedByDisk(objects.delete("k"), "delete", "k", "EROFS");
  } finally {
    disk!.readOnly(false);
  }
  objects.forget("k");
  assert.ok((await objects.get<Buffer>("k")).equals(v1), "the refused delete deleted nothing");

  assert.equal((await objects.update("k", v2)).version, 2, "the retried update is version 2, not 3");
  assert.equal((await objects.patch("k", tail)).version, 3);
  disk!.fill();
  await refusedByDisk(objects.update("k", v1), "update", "k", "ENOSPC");

  objects = (await restartHead()).objects;
  assert.ok((await objects.get<Buffer>("k")).equals(Buffer.concat([v2, tail])), "after a restart: version 3, as the driver was told");
  assert.equal(objects.heldVersion("k"), 3);
  disk!.free();
  assert.equal(await objects.delete("k"), 1);
});
