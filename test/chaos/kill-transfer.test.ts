/**
 * Chaos during large transfers: kill -9 of the head mid-upload, of a node
 * cache another node is copying from, of a node cache mid-copy, and of the
 * executor a copy is for. No partial object is ever visible: readers get the
 * last complete version, a restarted node cache starts empty, a node whose
 * peer died finishes its copy from the head, and the next read is exact.
 * Each kill waits for a signal that the transfer is under way (its received
 * file growing), never for a time.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fromFile } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { writePattern } from "../helpers/patterns.js";
import { DIST, rejection, startCluster, startHeadWithData, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";

const MiB = 1024 * 1024;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-kill-transfer-"));

after(() => rmSync(work, { recursive: true, force: true }));

/** `mib` MiB no two alike in a file; returns its path and sha256. */
function pattern(name: string, mib: number, seed: number): { file: string; sha: string } {
  const file = path.join(work, name);
  return { file, sha: writePattern(file, mib, seed) };
}

/** Files under `dir` (recursively) whose names end with `suffix`, with their sizes. */
function filesEnding(dir: string, suffix: string): Array<{ file: string; size: number }> {
  if (!existsSync(dir)) return [];
  const out: Array<{ file: string; size: number }> = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...filesEnding(p, suffix));
    else if (e.name.endsWith(suffix)) {
      try {
        out.push({ file: p, size: statSync(p).size });
      } catch {
        // renamed into place meanwhile
      }
    }
  }
  return out;
}

/** Where agent `id` of `cluster` keeps its node cache's files (its default: under the executors' folder when it runs them as their apps' users). */
function cacheDirOf(cluster: TestCluster, id: string): string {
  return process.geteuid?.() === 0 ? path.join(os.tmpdir(), "hearth-executors", `cache-${id}`) : path.join(cluster.dir, id, "cache");
}

/**
 * Waits until a copy of `total` bytes is being received under `dir`: a file
 * there holding at least `bytes` of it and not all (a node writes a copy's
 * parts where they will stay; an upload's file ends in `.receiving`).
 */
function receiving(dir: string, bytes: number, total = 300 * MiB): Promise<true> {
  return waitFor(`a copy under way in ${dir}`, () => (filesEnding(dir, "").some((f) => f.size >= bytes && f.size < total) ? true : undefined), 60_000);
}

test("kill -9 of the head mid-upload: nothing of it is visible after the restart, readers get the last version, the retry is exact", { timeout: 180_000 }, async () => {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "hearth-kill-upload-"));
  const first = startHeadWithData("tcp://127.0.0.1:0", dataDir);
  const endpoint = await first.endpoint;
  let second: ReturnType<typeof startHeadWithData> | undefined;
  const app = await connect({ name: "kill-upload", head: endpoint });
  let again: Awaited<ReturnType<typeof connect>> | undefined;
  try {
    const v1 = pattern("v1.bin", 3, 1);
    await app.objects.put(fromFile(v1.file), { key: "obj" });
    const big = pattern("big.bin", 300, 2);
    const writing = app.objects.update("obj", fromFile(big.file));
    await receiving(path.join(dataDir, "objects"), 40 * MiB);
    first.proc.kill("SIGKILL");
    await waitForExit("the first head", first.proc.pid!, 5000);
    second = startHeadWithData(endpoint, dataDir);
    await second.endpoint;
    const { error } = await rejection(writing);
    assert.ok(/HeadRestarted|Timeout|Closed|Connect/.test(error.name), `the interrupted upload failed: ${error.name}: ${error.message}`);
    assert.deepEqual(filesEnding(path.join(dataDir, "objects"), ".receiving"), [], "the restarted head removed the unfinished upload's file");
    again = await connect({ name: "kill-upload", head: endpoint });
    const back = path.join(work, "back-v1.bin");
    assert.deepEqual(await again.objects.getToFile("obj", back), { version: 1, size: 3 * MiB }, "the last complete version");
    assert.equal(createHash("sha256").update(readFileSync(back)).digest("hex"), v1.sha);
    const ref = await again.objects.update("obj", fromFile(big.file));
    assert.equal(ref.version, 2);
    const h = createHash("sha256");
    for await (const c of again.objects.getStream("obj")) h.update(c);
    assert.equal(h.digest("hex"), big.sha, "the retried upload is exact");
  } finally {
    await app.close().catch(() => undefined);
    await again?.close().catch(() => undefined);
    first.proc.kill("SIGKILL");
    second?.proc.kill("SIGKILL");
  }
});

test("kill -9 of the node a copy comes from: the copying node finishes from the head, exactly, keeping what it had", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "pa", cpus: 2 }, { id: "pb", cpus: 2 }] });
  const app = await connect({ name: "kill-peer", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 2, max: 2, resreq: "cpu=2" });
    const members = await pool.members();
    const onA = members.find((m) => m.agentId === "pa")!;
    const onB = members.find((m) => m.agentId === "pb")!;
    const big = pattern("peer.bin", 300, 3);
    await app.objects.put(fromFile(big.file), { key: "big" });
    assert.equal((await pool.callMember(onA.executorId, "streamDigest", "big")).sha256, big.sha, "node pa holds the copy");
    // Node pb copies from pa (the head names it); stop pa as soon as pb's copy is under way, then kill it.
    const reading = pool.callMember(onB.executorId, "streamDigest", "big");
    await receiving(cacheDirOf(cluster, "pb"), 1);
    const pa = cluster.agents.get("pa")!;
    pa.kill("SIGSTOP");
    pa.kill("SIGKILL");
    const r = await reading;
    assert.equal(r.sha256, big.sha, "pb's copy is exact");
    const st = (await pool.callMember(onB.executorId, "nodeStat")) as { fetches: { peerFailures: number }; recent: Array<{ key: string; source: string }> };
    assert.ok(st.fetches.peerFailures >= 1, "the copy from pa failed and was finished by the head");
    assert.equal(st.recent.filter((f) => f.key === "big").at(-1)?.source, "peer+head");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("kill -9 of a node cache mid-copy: the restarted node starts empty, and its next copy is exact", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "kc", cpus: 2 }] });
  const app = await connect({ name: "kill-node", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1", readyTimeoutMs: 60_000 });
    const big = pattern("node.bin", 300, 4);
    await app.objects.put(fromFile(big.file), { key: "big" });
    const [m] = await pool.members();
    const reading = pool.callMember(m!.executorId, "streamDigest", "big");
    const dir = cacheDirOf(cluster, "kc");
    await receiving(dir, 20 * MiB);
    cluster.agents.get("kc")!.kill("SIGKILL");
    await rejection(reading);
    await cluster.addAgent({ id: "kc", cpus: 2 });
    assert.deepEqual(filesEnding(dir, ""), [], "the restarted node cache holds no file: nothing partial is visible");
    const next = await waitFor("an executor on the restarted agent", async () => (await pool.members()).find((x) => x.agentId === "kc"), 60_000);
    assert.equal((await pool.callMember(next.executorId, "streamDigest", "big")).sha256, big.sha);
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("kill -9 of the executor a copy is for: the node's copy completes once, and the next executor reads it exactly", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "ke", cpus: 2 }] });
  const app = await connect({ name: "kill-reader", head: cluster.endpoint });
  try {
    const pool: PoolHandle<Streamer> = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1", readyTimeoutMs: 60_000 });
    const big = pattern("reader.bin", 300, 5);
    await app.objects.put(fromFile(big.file), { key: "big" });
    const [m] = await pool.members();
    const who = await pool.callMember(m!.executorId, "whoami");
    const reading = pool.callMember(m!.executorId, "streamDigest", "big");
    await receiving(cacheDirOf(cluster, "ke"), 20 * MiB);
    process.kill(who.pid, "SIGKILL");
    await rejection(reading);
    const next = await waitFor("a replacement executor", async () => (await pool.members()).find((x) => x.executorId !== m!.executorId), 60_000);
    assert.equal((await pool.callMember(next.executorId, "streamDigest", "big")).sha256, big.sha);
    const st = (await pool.callMember(next.executorId, "nodeStat")) as { recent: Array<{ key: string }> };
    assert.equal(st.recent.filter((f) => f.key === "big").length, 1, "the node copied it once, for both executors");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("a full disk under the node cache fails the copy naming the object and the disk, and loses nothing", { timeout: 120_000, skip: process.geteuid?.() === 0 ? false : "needs root: a real small disk is a mounted tmpfs" }, async () => {
  const { SmallDisk } = await import("../helpers/small-disk.js");
  const disk = SmallDisk.mount(32);
  // The executors' users must reach the cache dir when they run as their apps' own users.
  chmodSync(disk.dir, 0o711);
  const cluster = await startCluster({ agents: [{ id: "fd", cpus: 2, args: ["--cache-dir", path.join(disk.dir, "cache")] }] });
  const app = await connect({ name: "full-node", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1" });
    const big = pattern("full-big.bin", 64, 6);
    const small = pattern("full-small.bin", 4, 7);
    await app.objects.put(fromFile(big.file), { key: "big" });
    await app.objects.put(fromFile(small.file), { key: "small" });
    const [m] = await pool.members();
    const { error } = await rejection(pool.callMember(m!.executorId, "streamDigest", "big"));
    assert.match(error.message, /ObjectStorageError/);
    assert.match(error.message, /fetch of 'big' failed: this node's cache dir refused it \(ENOSPC/);
    assert.deepEqual(filesEnding(path.join(disk.dir, "cache"), ".receiving"), [], "the refused copy left no file");
    assert.equal((await pool.callMember(m!.executorId, "streamDigest", "small")).sha256, small.sha, "the node still copies what fits");
    const h = createHash("sha256");
    for await (const c of app.objects.getStream("big")) h.update(c);
    assert.equal(h.digest("hex"), big.sha, "the head's copy is whole");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
    disk.unmount();
  }
});
