/**
 * A chunked upload commits only when every byte of it has arrived: chunks are
 * the CHUNK-sized pieces obj-begin named, a resent chunk counts once, a
 * misplaced or mis-sized one is refused, and an incomplete commit leaves the
 * upload open for the missing chunks. (The buffer is allocated
 * uninitialised: a commit that counted bytes rather than pieces could serve
 * whatever memory held before.)
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { ObjectStore } from "../../cluster-agent/head/object-store.js";
import { ObjectService } from "../../cluster-agent/object-service.js";
import { CHUNK } from "../../sdk/cache/transfer.js";
import { encode, decodeHeader } from "../../sdk/wire/codec.js";

const service = () => new ObjectService(new ObjectStore({ memLimit: 64 * 1024 * 1024 }));
const h = (fields: Record<string, unknown>) => decodeHeader(encode({ t: "req", ...fields }));
const chunk = (svc: ObjectService, tid: number, offset: number, data: Buffer) => svc.handle("obj-chunk", "app", h({ tid, offset }), [Buffer.alloc(0), data], "driver");

test("a resent chunk counts once: the commit waits for the missing ones, then stores exactly what was sent", async () => {
  const svc = service();
  const size = 2 * CHUNK + 100;
  const { tid } = (await svc.handle("obj-begin", "app", h({ write: "put", key: "w", kind: "bytes", size }), [], "driver")).value as { tid: number };
  await chunk(svc, tid, 0, Buffer.alloc(CHUNK, 1));
  await chunk(svc, tid, 0, Buffer.alloc(CHUNK, 1));
  await chunk(svc, tid, 0, Buffer.alloc(CHUNK, 1));
  await assert.rejects(svc.handle("obj-commit", "app", h({ tid }), [], "driver"), /received 8388608 of 16777316 bytes; send the missing chunks/);
  await chunk(svc, tid, CHUNK, Buffer.alloc(CHUNK, 2));
  await chunk(svc, tid, 2 * CHUNK, Buffer.alloc(100, 3));
  const done = (await svc.handle("obj-commit", "app", h({ tid }), [], "driver")).value as { version: number; size: number };
  assert.deepEqual([done.version, done.size], [1, size]);
  const stored = svc.store.read("app/w");
  assert.ok(stored.mode === "full");
  assert.equal(stored.parts[0]!.data, undefined, "a large part is not held in memory");
  const data = readFileSync(svc.store.pathOf(stored.object, stored.parts[0]!));
  assert.ok(data.subarray(0, CHUNK).equals(Buffer.alloc(CHUNK, 1)) && data.subarray(CHUNK, 2 * CHUNK).equals(Buffer.alloc(CHUNK, 2)) && data.subarray(2 * CHUNK).equals(Buffer.alloc(100, 3)));
  svc.store.close();
});

test("a chunk off the CHUNK grid or of the wrong size is refused and changes nothing", async () => {
  const svc = service();
  const { tid } = (await svc.handle("obj-begin", "app", h({ write: "put", key: "w", kind: "bytes", size: 2 * CHUNK }), [], "driver")).value as { tid: number };
  await assert.rejects(chunk(svc, tid, 1, Buffer.alloc(CHUNK - 1)), /expected 8388608 bytes at a multiple of 8388608 \(got 8388607 at 1\)/);
  await assert.rejects(chunk(svc, tid, 0, Buffer.alloc(100)), /expected 8388608 bytes at a multiple of 8388608 \(got 100 at 0\)/);
  await assert.rejects(chunk(svc, tid, CHUNK, Buffer.alloc(CHUNK + 1)), /outside the declared size/);
  await assert.rejects(svc.handle("obj-commit", "app", h({ tid }), [], "driver"), /received 0 of/);
  svc.close();
  svc.store.close();
});

test("a stream of unknown length commits at the size its commit names, and only when its chunks cover it", async () => {
  const svc = service();
  const { tid } = (await svc.handle("obj-begin", "app", h({ write: "put", key: "s", kind: "bytes" }), [], "driver")).value as { tid: number };
  await chunk(svc, tid, 0, Buffer.alloc(CHUNK, 4));
  await chunk(svc, tid, CHUNK, Buffer.alloc(5000, 5));
  await assert.rejects(svc.handle("obj-commit", "app", h({ tid }), [], "driver"), /needs the size of each part/);
  await assert.rejects(svc.handle("obj-commit", "app", h({ tid, size: CHUNK + 6000 }), [], "driver"), /send the missing chunks/);
  const done = (await svc.handle("obj-commit", "app", h({ tid, size: CHUNK + 5000 }), [], "driver")).value as { size: number };
  assert.equal(done.size, CHUNK + 5000);
  const stored = svc.store.read("app/s");
  assert.ok(stored.mode === "full");
  const data = readFileSync(svc.store.pathOf(stored.object, stored.parts[0]!));
  assert.ok(data.equals(Buffer.concat([Buffer.alloc(CHUNK, 4), Buffer.alloc(5000, 5)])));
  svc.store.close();
});
