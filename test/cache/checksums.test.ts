/**
 * A part whose bytes changed on disk is refused at read, never served (real
 * head, agents and executors). Each part carries the CRC-32 of each 8 MiB
 * chunk, recorded when the head received it; the head checks a chunk before
 * it sends it, a node checks each chunk it receives (from the head or a
 * peer) and before it passes one on, and an executor checks its node's file
 * as it reads it. One flipped byte in a file is enough to be caught.
 */
import assert from "node:assert/strict";
import { closeSync, mkdtempSync, openSync, readSync, readdirSync, rmSync, statSync, writeSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fromFile } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import { ObjectCorruptError, RemoteError } from "../../sdk/errors/index.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, rejection, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { writePattern } from "../helpers/patterns.js";

const MiB = 1024 * 1024;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-sums-"));

after(() => rmSync(work, { recursive: true, force: true }));

/** Files under `dir` (recursively) whose names match `re`. */
function filesMatching(dir: string, re: RegExp): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? filesMatching(p, re) : re.test(e.name) ? [p] : [];
  });
}

/** Flips one byte of `file` at `offset` (in place: same size, same inode). */
function flipByte(file: string, offset: number): void {
  const fd = openSync(file, "r+");
  try {
    const b = Buffer.alloc(1);
    readSync(fd, b, 0, 1, offset);
    b[0] = b[0]! ^ 0xff;
    writeSync(fd, b, 0, 1, offset);
  } finally {
    closeSync(fd);
  }
}

/** Where agent `id` keeps its node cache's files, as its heartbeat reports it. */
function cacheDirOf(cluster: TestCluster, id: string): Promise<string> {
  return waitFor(`agent ${id}'s cache folder`, async () => (await cluster.status()).agents.find((a: any) => a.id === id)?.cache?.dir);
}

function assertCorrupt(error: Error, key: string, offset: number): void {
  assert.ok(error instanceof ObjectCorruptError, `${error.name}: ${error.message}`);
  assert.deepEqual([error.key, error.part, error.offset], [key, 0, offset]);
  assert.match(error.message, new RegExp(`part 0 of '${key}' is corrupt: the \\d+ bytes at offset ${offset}.*refused, not served`));
}

test("the head refuses a large part whose file changed, before and after a restart, and a small one reloaded from disk", { timeout: 120_000 }, async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-sums-data-"));
  let cluster = await startCluster({ agents: [], headArgs: ["--data-dir", dataDir] });
  let app = await connect({ name: "sums", head: cluster.endpoint });
  try {
    const big = path.join(work, "big.bin");
    writePattern(big, 20, 1);
    await app.objects.put(fromFile(big), { key: "big" });
    await app.objects.put(Buffer.alloc(200 * 1024, 7), { key: "small" });
    const [bigFile] = filesMatching(path.join(dataDir, "objects"), /\.1\.base$/).filter((f) => statSync(f).size === 20 * MiB);
    assert.ok(bigFile, "the big object's part file");
    flipByte(bigFile, 8 * MiB + 12345);
    assertCorrupt((await rejection(app.objects.getToFile("big", path.join(work, "back.bin")))).error, "big", 8 * MiB);
    const streamed = await rejection((async () => {
      for await (const chunk of app.objects.getStream("big")) void chunk;
    })());
    assertCorrupt(streamed.error, "big", 8 * MiB);

    // The sums are part of what the data dir keeps: a restarted head refuses the same bytes, and checks a small part it reloads.
    const [smallFile] = filesMatching(path.join(dataDir, "objects"), /\.1\.base$/).filter((f) => statSync(f).size === 200 * 1024);
    assert.ok(smallFile, "the small object's part file");
    await app.close();
    await cluster.stop();
    flipByte(smallFile, 100);
    cluster = await startCluster({ agents: [], headArgs: ["--data-dir", dataDir] });
    app = await connect({ name: "sums", head: cluster.endpoint });
    assertCorrupt((await rejection(app.objects.getToFile("big", path.join(work, "back2.bin")))).error, "big", 8 * MiB);
    assertCorrupt((await rejection(app.objects.get("small"))).error, "small", 0);
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test("a node's copy that changed on disk: its executor's read is refused, and another node copying from it takes the rest from the head, exactly", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "ca", cpus: 2 }, { id: "cb", cpus: 2 }] });
  const app = await connect({ name: "sums-node", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 2, max: 2, resreq: "cpu=2" });
    const members = await pool.members();
    const onA = members.find((m) => m.agentId === "ca")!;
    const onB = members.find((m) => m.agentId === "cb")!;
    const big = path.join(work, "node.bin");
    const sha = writePattern(big, 20, 2);
    await app.objects.put(fromFile(big), { key: "big" });
    assert.equal((await pool.callMember(onA.executorId, "streamDigest", "big")).sha256, sha, "node ca holds an exact copy");
    const [copy] = filesMatching(await cacheDirOf(cluster, "ca"), /\.base$/);
    assert.ok(copy, "node ca's copy of the part");
    flipByte(copy, 16 * MiB + 3);

    const local = await rejection(pool.callMember(onA.executorId, "streamDigest", "big"));
    assert.ok(local.error instanceof RemoteError && local.error.remoteName === "ObjectCorruptError", `${local.error.name}: ${local.error.message}`);
    assert.match(local.error.message, /part 0 of 'big' is corrupt: the 4194304 bytes at offset 16777216/);

    // Node cb is told to copy from ca (it holds that version); ca refuses the bad chunk, cb takes it from the head.
    const r = await pool.callMember(onB.executorId, "streamDigest", "big");
    assert.equal(r.sha256, sha, "cb's copy is exact");
    const st = (await pool.callMember(onB.executorId, "nodeStat")) as { fetches: { peerFailures: number }; recent: Array<{ key: string; source: string }> };
    assert.equal(st.recent.filter((f) => f.key === "big").at(-1)?.source, "peer+head", "cb started from ca and the head served the rest");
    assert.ok(st.fetches.peerFailures >= 1);
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});
