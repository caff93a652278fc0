/**
 * Whole-object buffers, bounded. `get` makes one buffer of an object: 1 GiB
 * at most by default (not Node's 4 GiB), with an error that names the
 * streaming calls. Reading a file whole never goes through readFileSync,
 * which stops at 2 GiB whatever the limit: an executor's `get` of a large
 * part (with a raised limit) and a warm start's digest of a model shard read
 * a chunk at a time. And a node's `obj-open` answer carries at most 16 MiB of
 * small parts inline (ZeroMQ's 64 MiB bounds each frame, not a message, so
 * a base of 4096 parts of 1 MiB made one 4 GiB answer, past read credit):
 * a base of 80 small parts (72 MiB) reaches an executor whole, the rest pulled.
 *
 * This process raises its own limit to 3g (before anything reads it) for
 * the part larger than 2 GiB; the default is checked through ceilingFrom.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readSync, rmSync, truncateSync, writeSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";

process.env.HEARTH_MAX_BUFFER_BYTES = "3g";

import { admitObjectBuffer, ceilingFrom, DEFAULT_MAX_BUFFER_BYTES } from "../../sdk/cache/buffers.js";
import { fromParts, fromStream, ObjectCache } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import { BufferLimitError } from "../../sdk/errors/index.js";
import { folderDigests } from "../../sdk/rl/run/warm-start.js";
import type { Requester } from "../../sdk/wire/requests.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, startCluster } from "../helpers/cluster.js";

const GiB = 1024 ** 3;
const MiB = 1024 * 1024;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-bounds-"));

after(() => rmSync(work, { recursive: true, force: true }));

/** A sparse file of `size` bytes with a marker of 16 bytes written at `at` (past 2 GiB): cheap to make, not cheap to read. */
function sparseFile(name: string, size: number, at: number): { file: string; marker: Buffer } {
  const file = path.join(work, name);
  closeSync(openSync(file, "w"));
  truncateSync(file, size);
  const marker = Buffer.from("past-2-GiB-mark!");
  const fd = openSync(file, "r+");
  writeSync(fd, marker, 0, marker.length, at);
  closeSync(fd);
  return { file, marker };
}

function streamedSha(file: string): string {
  const h = createHash("sha256");
  const buf = Buffer.allocUnsafe(8 * MiB);
  const fd = openSync(file, "r");
  for (let n = readSync(fd, buf, 0, buf.length, null); n > 0; n = readSync(fd, buf, 0, buf.length, null)) h.update(buf.subarray(0, n));
  closeSync(fd);
  return h.digest("hex");
}

test("the default ceiling is 1 GiB, and a buffer past it is refused naming the streaming calls", () => {
  assert.equal(DEFAULT_MAX_BUFFER_BYTES, GiB);
  assert.equal(ceilingFrom(undefined), GiB, "with no HEARTH_MAX_BUFFER_BYTES");
  assert.equal(ceilingFrom("64m"), 64 * MiB);
  assert.equal(ceilingFrom("3g"), 3 * GiB);
  assert.equal(ceilingFrom("8g"), 4 * GiB, "never past Node's largest Buffer");
  // This process runs at 3g: 3 GiB + 1 byte is refused, with what to use instead.
  const err = (() => {
    try {
      admitObjectBuffer(3 * GiB + 1, { key: "weights", app: "a" });
    } catch (e) {
      return e as BufferLimitError;
    }
    return undefined;
  })();
  assert.ok(err instanceof BufferLimitError);
  assert.match(err.message, /read it with getStream, getToFile or getParts/);
});

test("an executor's get of a part larger than 2 GiB reads it a chunk at a time into one buffer (readFileSync would refuse it)", { timeout: 120_000 }, async () => {
  const size = 2 * GiB + 4096;
  const at = 2 * GiB + 100;
  const { file, marker } = sparseFile("big-part.bin", size, at);
  // The node cache's answer to obj-open, as an executor's client gets it: the part is a file of the node.
  const node: Requester = {
    request: async (op: string) => {
      assert.equal(op, "obj-open");
      return { value: { mode: "full", version: 1, baseVersion: 1, parts: [{ kind: "bytes", size, version: 1, file }] }, frames: [] };
    },
  } as unknown as Requester;
  const objects = new ObjectCache(node, node, { local: true });
  const value = await objects.get<Buffer>("big");
  assert.equal(value.byteLength, size);
  assert.ok(value.subarray(at, at + marker.length).equals(marker), "the bytes past 2 GiB are the file's");
  assert.equal(objects.stats.bytesReadLocal, size);
});

test("a warm start's digest of a model shard larger than 2 GiB is read a chunk at a time", { timeout: 120_000 }, () => {
  const model = mkdtempSync(path.join(work, "model-"));
  const target = path.join(model, "model.safetensors");
  closeSync(openSync(target, "w"));
  truncateSync(target, 2 * GiB + 1);
  const digests = folderDigests(model);
  assert.deepEqual(Object.keys(digests), ["model.safetensors"]);
  assert.equal(digests["model.safetensors"], streamedSha(target));
});

test("a base of 80 small parts (72 MiB) reaches an executor whole through its node, at most 16 MiB of it inline", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "sp", cpus: 2 }] });
  const app = await connect({ name: "small-parts", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1" });
    const part = (i: number) => Buffer.alloc(900 * 1024, i + 1);
    await app.objects.put(
      fromParts(Array.from({ length: 80 }, (_, i) => fromStream((async function* () { yield part(i); })()))),
      { key: "many" },
    );
    const [m] = await pool.members();
    const servedBefore = (((await pool.callMember(m!.executorId, "nodeStat")) as { traffic: { bytesOutTo: Record<string, number> } }).traffic.bytesOutTo.executor ?? 0);
    const got = await pool.callMember(m!.executorId, "parts", "many");
    // ZeroMQ bounds each frame, not a message: the bound is the node's, on what one answer carries inline. The rest
    // was pulled in chunks under the connection's read credit (the node's counter of object bytes sent to executors).
    const st = (await pool.callMember(m!.executorId, "nodeStat")) as { traffic: { bytesOutTo: Record<string, number> } };
    const pulled = (st.traffic.bytesOutTo.executor ?? 0) - servedBefore;
    assert.ok(pulled >= 80 * 900 * 1024 - 16 * MiB && pulled <= 80 * 900 * 1024, `${pulled} bytes pulled: at most 16 MiB of the 72 MiB came in the answer itself`);
    assert.equal(got.parts.length, 80);
    assert.deepEqual(
      got.parts.map((p) => p.sha256),
      Array.from({ length: 80 }, (_, i) => createHash("sha256").update(part(i)).digest("hex")),
      "every part, in order, exactly",
    );
    assert.ok(got.parts.every((p) => p.file === undefined), "small parts travel as bytes, not files");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});
