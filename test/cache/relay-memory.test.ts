/**
 * A node passing a copy on while it receives it serves the peers reading
 * right behind it from the chunks that just arrived (checked on arrival),
 * not by reading each back from its file and summing it again; an older
 * chunk is read from the file and checked, so bytes that changed there are
 * refused, never served.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, openSync, rmSync, writeSync, closeSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { RECENT_CHUNKS, ReceivingPart } from "../../cluster-agent/receiving.js";
import { chunkSum } from "../../sdk/cache/file-io.js";
import { CHUNK } from "../../sdk/cache/transfer.js";
import { ObjectCorruptError } from "../../sdk/errors/index.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-relay-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("the chunks that just arrived are served from memory; an older one is read back from the file and checked", async () => {
  const n = RECENT_CHUNKS + 2;
  const chunks = Array.from({ length: n }, () => randomBytes(CHUNK));
  const file = path.join(dir, "part");
  const part = new ReceivingPart({ kind: "bytes", size: n * CHUNK, version: 1, sums: chunks.map(chunkSum) }, file, 0o600, { key: "w", app: "app" });
  const peer = part.source();
  try {
    for (const [i, c] of chunks.entries()) await part.write(c, i * CHUNK);
    assert.equal(part.complete, true);
    // The file's bytes change under the copy (a disk's fault, a hand): the first and the last chunk.
    const fd = openSync(file, "r+");
    writeSync(fd, Buffer.alloc(64, 0xee), 0, 64, 0);
    writeSync(fd, Buffer.alloc(64, 0xee), 0, 64, (n - 1) * CHUNK + 100);
    closeSync(fd);
    // The last chunk arrived lately: served as it arrived (checked then), the changed file not read.
    const last = await peer.read((n - 1) * CHUNK, CHUNK);
    assert.ok(last.equals(chunks[n - 1]!), "the peer got the chunk as it arrived");
    const middle = await peer.read((n - 2) * CHUNK + 4096, 8192);
    assert.ok(middle.equals(chunks[n - 2]!.subarray(4096, 4096 + 8192)), "a read inside a kept chunk is its bytes");
    assert.equal(part.servedFromMemory, CHUNK + 8192, "both reads came from memory");
    // The first chunk is past the RECENT_CHUNKS kept: read back from the file, where its sum refuses it.
    await assert.rejects(peer.read(0, CHUNK), ObjectCorruptError);
    // An unchanged older chunk is read back and passes.
    assert.ok((await peer.read(CHUNK, CHUNK)).equals(chunks[1]!));
    assert.equal(part.servedFromMemory, CHUNK + 8192, "the older chunks were not served from memory");
  } finally {
    peer.close();
    part.done(true);
  }
});

test("once the copy is installed the kept chunks are let go: every read is from the file, checked", async () => {
  const chunks = [randomBytes(CHUNK), randomBytes(1000)];
  const file = path.join(dir, "installed");
  const part = new ReceivingPart({ kind: "bytes", size: CHUNK + 1000, version: 1, sums: chunks.map(chunkSum) }, file, 0o600, { key: "w", app: "app" });
  const peer = part.source();
  try {
    for (const [i, c] of chunks.entries()) await part.write(c, i * CHUNK);
    part.done(false);
    const fd = openSync(file, "r+");
    writeSync(fd, Buffer.alloc(8, 0xee), 0, 8, CHUNK + 10);
    closeSync(fd);
    await assert.rejects(peer.read(CHUNK, 1000), ObjectCorruptError, "the changed file is refused: the chunk was not served from memory");
    assert.equal(part.servedFromMemory, 0);
  } finally {
    peer.close();
  }
});
