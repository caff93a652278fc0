/**
 * A node keeping a writer's files (cluster-agent/node-keep.ts), against
 * real files: a file on the cache dir's file system is linked (the same
 * inode, now the agent's, at the app's mode), one on another is copied, and
 * each is read back against the sums the head received. A file of another
 * user, a link, or bytes that changed after they were sent are not kept.
 */
import assert from "node:assert/strict";
import { chownSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { KeptUploads } from "../../cluster-agent/node-keep.js";
import { CHUNK, chunkSum } from "../../sdk/cache/file-io.js";

const work = mkdtempSync(path.join(os.tmpdir(), "hearth-keep-"));
after(() => rmSync(work, { recursive: true, force: true }));
const uid = process.geteuid?.() ?? 0;

/** A node's app folder in `parent`, and its KeptUploads (files private, of this process's user). */
function node(parent: string): { dir: string; keeps: KeptUploads } {
  const dir = mkdtempSync(path.join(parent, "node-"));
  let seq = 0;
  const keeps = new KeptUploads({ fileFor: () => path.join(dir, `kept-${++seq}.receiving`), ownerOf: () => uid, groupOf: () => undefined, fileMode: () => 0o600, maxBytes: 4 * SIZE });
  return { dir, keeps };
}

/** A file of `size` bytes from `seed`, and its chunk sums. */
function written(file: string, size: number, seed: number): number[] {
  const data = Buffer.alloc(size);
  for (let i = 0; i < size; i += 4) data.writeUInt32LE((i * 2654435761 + seed) >>> 0, i);
  writeFileSync(file, data, { mode: 0o644 });
  const sums: number[] = [];
  for (let at = 0; at < size; at += CHUNK) sums.push(chunkSum(data.subarray(at, at + CHUNK)));
  return sums;
}

const SIZE = CHUNK + 4 * 1024 * 1024;

test("a file on the cache dir's file system is linked, made private, and checked; claim hands the parts over in order", async () => {
  const { dir, keeps } = node(work);
  const a = path.join(work, "a.bin");
  const b = path.join(work, "b.bin");
  const sa = written(a, SIZE, 1);
  const sb = written(b, SIZE, 2);
  await keeps.keep("app", "t1", 1, b, SIZE, sb);
  await keeps.keep("app", "t1", 0, a, SIZE, sa);
  assert.equal(keeps.bytes, 2 * SIZE);
  const parts = keeps.claim("app", "t1")!;
  assert.equal(parts.length, 2);
  await Promise.all(parts.map((p) => p.checked));
  assert.equal(statSync(parts[0]!.file!).ino, statSync(a).ino, "the same inode: no byte copied");
  assert.equal(statSync(parts[0]!.file!).mode & 0o777, 0o600, "at the app's file mode");
  assert.deepEqual(parts.map((p) => p.sums), [sa, sb]);
  assert.equal(keeps.bytes, 0, "claimed: no longer counted as kept");
  assert.equal(keeps.claim("app", "t1"), undefined);
  assert.equal(readdirSync(dir).length, 2);
});

test("a file on another file system is copied, each chunk checked", { skip: !statSafe("/dev/shm") || statSync("/dev/shm").dev === statSync(work).dev ? "no second file system here" : false }, async () => {
  const shm = mkdtempSync(path.join("/dev/shm", "hearth-keep-"));
  try {
    const { keeps } = node(shm);
    const a = path.join(work, "c.bin");
    const sums = written(a, SIZE, 3);
    await keeps.keep("app", "t2", 0, a, SIZE, sums);
    const [p] = keeps.claim("app", "t2")!;
    await p!.checked;
    assert.notEqual(statSync(p!.file!).dev, statSync(a).dev);
    assert.equal(statSync(p!.file!).size, SIZE);
  } finally {
    rmSync(shm, { recursive: true, force: true });
  }
});

test("bytes that changed after they were sent fail the check; discard removes the kept files", async () => {
  const { dir, keeps } = node(work);
  const a = path.join(work, "d.bin");
  const sums = written(a, SIZE, 4);
  await keeps.keep("app", "t3", 0, a, SIZE, sums.map((s) => (s + 1) >>> 0));
  const [p] = keeps.claim("app", "t3")!;
  await assert.rejects(p!.checked, /sum .* not the .* the head received/);
  await keeps.keep("app", "t4", 0, a, SIZE, sums);
  keeps.discard("app", "t4");
  assert.deepEqual(readdirSync(dir), [path.basename(p!.file!)], "only the claimed part's file is left (its owner removes it)");
});

test("a small part's bytes are kept in memory once they match their sums", () => {
  const { dir, keeps } = node(work);
  const data = Buffer.alloc(4096, 9);
  assert.throws(() => keeps.keepSmall("app", "t6", 0, data, [(chunkSum(data) + 1) >>> 0]), /sum/);
  keeps.keepSmall("app", "t6", 0, data, [chunkSum(data)]);
  assert.equal(keeps.bytes, 0, "not file bytes");
  const [p] = keeps.claim("app", "t6")!;
  assert.deepEqual([p!.file, p!.data], [undefined, data]);
  assert.deepEqual(readdirSync(dir), []);
});

test("a link, another user's file, a file of another size or a small part are not kept, and leave nothing", async () => {
  const { dir, keeps } = node(work);
  const a = path.join(work, "e.bin");
  const sums = written(a, SIZE, 5);
  const link = path.join(work, "e.link");
  symlinkSync(a, link);
  await assert.rejects(keeps.keep("app", "t5", 0, link, SIZE, sums), /not a regular file/);
  await assert.rejects(keeps.keep("app", "t5", 0, a, SIZE + 1, sums), /has \d+ bytes, not/);
  await assert.rejects(keeps.keep("app", "t5", 0, a, 1024, [0]), /only file parts are kept/);
  for (let i = 0; i < 4; i++) await keeps.keep("app", "t7", i, a, SIZE, sums);
  await assert.rejects(keeps.keep("app", "t7", 4, a, SIZE, sums), /would pass the .* bytes of uploads this node may hold/);
  keeps.discard("app", "t7");
  if (uid === 0) {
    const other = path.join(work, "f.bin");
    const s = written(other, SIZE, 6);
    chownSync(other, 12345, 12345);
    await assert.rejects(keeps.keep("app", "t5", 0, other, SIZE, s), /not a regular file of uid/);
  }
  assert.deepEqual(readdirSync(dir), []);
  assert.equal(keeps.claim("app", "t5"), undefined);
});

function statSafe(p: string): boolean {
  try {
    statSync(p);
    return true;
  } catch {
    return false;
  }
}
