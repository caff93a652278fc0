/**
 * A write that returns short is not a written chunk. On a real tmpfs filled
 * to within 1 MiB, an 8 MiB chunk's write takes the 1 MiB that fits and
 * returns that count with no error (the next write would get ENOSPC). The
 * head's upload, a node's copy and a driver's file sink must each fail at
 * that chunk with a clear error, keep nothing and commit nothing, even when
 * room comes back before the next chunk (which is how a hole of zeros at the
 * right size used to commit: the short chunk counted as written, and the
 * later chunks landed once the cache had evicted something).
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { ObjectStore } from "../../cluster-agent/head/object-store.js";
import { ObjectService } from "../../cluster-agent/object-service.js";
import { ReceivingPart } from "../../cluster-agent/receiving.js";
import { fileSink } from "../../sdk/cache/sinks.js";
import { CHUNK } from "../../sdk/cache/transfer.js";
import { ObjectNotFoundError, ObjectStorageError } from "../../sdk/errors/index.js";
import { decodeHeader, encode } from "../../sdk/wire/codec.js";
import { rejection } from "../helpers/cluster.js";
import { SmallDisk, smallDiskSupport } from "../helpers/small-disk.js";

const support = smallDiskSupport();
const skip = support.ok ? false : support.reason;
const MiB = 1024 * 1024;

let disk: SmallDisk | undefined;

before(() => {
  if (!skip) disk = SmallDisk.mount(24);
});

after(() => disk?.unmount());

const h = (fields: Record<string, unknown>) => decodeHeader(encode({ t: "req", ...fields }));
const chunkOf = (fill: number, size = CHUNK) => Buffer.alloc(size, fill);

/** Files under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)]));
}

test("the head's upload: a short write fails the upload at that chunk, drops its file, and nothing commits when room comes back", { skip }, async () => {
  const dataDir = path.join(disk!.dir, "head");
  const store = new ObjectStore({ memLimit: 64 * MiB, dataDir }).open();
  const svc = new ObjectService(store);
  try {
    const size = 2 * CHUNK + 100;
    const { tid } = (await svc.handle("obj-begin", "app", h({ write: "put", key: "w", kind: "bytes", size }), [], "driver")).value as { tid: number };
    disk!.fill({ leave: MiB });
    const { error } = await rejection(svc.handle("obj-chunk", "app", h({ tid, offset: 0 }), [Buffer.alloc(0), chunkOf(1)], "driver"));
    assert.ok(error instanceof ObjectStorageError, `${error.name}: ${error.message}`);
    assert.deepEqual([error.op, error.key, error.app, error.code], ["put", "w", "app", "ENOSPC"]);
    assert.match(error.message, /put of 'w' failed: the head's data dir refused it .*\(the upload was dropped\)/);
    // Room again, as after an eviction: the rest of the upload must still find nothing to add to or commit.
    disk!.free();
    await assert.rejects(svc.handle("obj-chunk", "app", h({ tid, offset: CHUNK }), [Buffer.alloc(0), chunkOf(2)], "driver"), /no write transfer/);
    await assert.rejects(svc.handle("obj-commit", "app", h({ tid }), [], "driver"), /no write transfer/);
    assert.throws(() => store.read("app/w"), ObjectNotFoundError, "nothing of the upload committed");
    assert.deepEqual(filesUnder(dataDir), [], "the upload's file is gone");
  } finally {
    disk!.free();
    svc.close();
    store.close();
  }
});

test("a node's copy: a short write fails the copy at that chunk, its readers with it, and removes its file", { skip }, async () => {
  const file = path.join(disk!.dir, "copy.receiving");
  const part = new ReceivingPart({ kind: "bytes", size: 2 * CHUNK, version: 1 }, file, 0o600, { key: "w", app: "app" });
  disk!.fill({ leave: MiB });
  try {
    const { error } = await rejection(part.write(chunkOf(1), 0));
    assert.ok(error instanceof ObjectStorageError, `${error.name}: ${error.message}`);
    assert.deepEqual([error.op, error.code], ["fetch", "ENOSPC"]);
    assert.match(error.message, /fetch of 'w' failed: this node's cache dir refused it/);
    disk!.free();
    const later = await rejection(part.write(chunkOf(2), CHUNK));
    assert.equal(later.error, error, "a later chunk fails with the copy's first error: nothing more lands");
    assert.equal(part.written, 0, "no byte of the short chunk is counted as written");
    assert.equal(part.complete, false);
    await assert.rejects(part.whole, ObjectStorageError, "a reader waiting for the whole part is told");
    assert.equal(existsSync(file), false, "the copy's file is removed");
  } finally {
    disk!.free();
  }
});

test("a driver's file sink: a short write fails the download at that chunk", { skip }, async () => {
  const file = path.join(disk!.dir, "download.bin");
  const sink = fileSink(file);
  disk!.fill({ leave: MiB });
  try {
    const { error } = await rejection(Promise.resolve(sink.write(chunkOf(3), 0)));
    assert.equal((error as NodeJS.ErrnoException).code, "ENOSPC", `${error.name}: ${error.message}`);
    await sink.abort(error);
    assert.equal(existsSync(file), false);
  } finally {
    disk!.free();
  }
});
