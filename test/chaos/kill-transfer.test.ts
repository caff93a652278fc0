/**
 * Chaos during large transfers: kill -9 of the head mid-upload, of a node
 * cache another node is copying from, of a node cache mid-copy, and of the
 * executor a copy is for. No partial object is ever visible: readers get the
 * last complete version; a restarted node cache finds the partial copy the
 * killed one left, removes it and copies again; a node whose peer died keeps
 * the chunks it had and takes only the rest from the head; a copy outlives
 * the executor it was for and is not made twice; a full disk leaves no file
 * of the refused copy. Each kill waits for a signal that the transfer is
 * under way (its file growing), never for a time.
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
import { startStallRelay } from "../helpers/stall-relay.js";
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

/** Where agent `id` of `cluster` keeps its node cache's files, as its heartbeat reports it. */
function cacheDirOf(cluster: TestCluster, id: string): Promise<string> {
  return waitFor(`agent ${id}'s cache folder`, async () => (await cluster.status()).agents.find((a: any) => a.id === id)?.cache?.dir);
}

/** What a node cache's obj-stat says of its fetches. */
interface NodeStat {
  fetches: { started: number; fromHead: number; fromPeers: number; peerFailures: number; bytesFromHead: number; bytesFromPeers: number };
  recent: Array<{ key: string; source: string; bytes: number }>;
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
    // Its failure is awaited below; watched from now on, so a rejection while the new head starts is not an unhandled one.
    const failed = rejection(writing);
    await receiving(path.join(dataDir, "objects"), 40 * MiB);
    first.proc.kill("SIGKILL");
    await waitForExit("the first head", first.proc.pid!, 5000);
    second = startHeadWithData(endpoint, dataDir);
    await second.endpoint;
    const { error } = await failed;
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
    const before = (await pool.callMember(onB.executorId, "nodeStat")) as unknown as NodeStat;
    const headSent = async (): Promise<number> => ((await cluster.status()).objects.traffic.bytesOutTo.agent as number | undefined) ?? 0;
    const headBefore = await headSent();
    const reading = pool.callMember(onB.executorId, "streamDigest", "big");
    await receiving(await cacheDirOf(cluster, "pb"), 16 * MiB);
    const pa = cluster.agents.get("pa")!;
    pa.kill("SIGSTOP");
    pa.kill("SIGKILL");
    const r = await reading;
    assert.equal(r.sha256, big.sha, "pb's copy is exact");
    const st = (await pool.callMember(onB.executorId, "nodeStat")) as unknown as NodeStat;
    assert.ok(st.fetches.peerFailures > before.fetches.peerFailures, "the copy from pa failed and was finished by the head");
    assert.equal(st.recent.filter((f) => f.key === "big").at(-1)?.source, "peer+head");
    // What pb had from pa stayed: the head sent only the rest, and no byte came twice.
    const fromPeer = st.fetches.bytesFromPeers - before.fetches.bytesFromPeers;
    const fromHead = st.fetches.bytesFromHead - before.fetches.bytesFromHead;
    assert.ok(fromPeer >= 16 * MiB, `pb kept the ${fromPeer / MiB} MiB it had from pa`);
    assert.equal(fromPeer + fromHead, 300 * MiB, `pb took ${fromPeer / MiB} MiB from pa and ${fromHead / MiB} MiB from the head: each byte once`);
    // The head's own count: it sent pb only what pa had not (a refetch of the chunks pb had would show here).
    assert.equal((await headSent()) - headBefore, 300 * MiB - fromPeer, "the head sent pb only the chunks it did not have from pa");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("kill -9 of a node cache mid-copy: the restarted node finds the partial copy, removes it, and copies again exactly", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "kc", cpus: 2 }] });
  const app = await connect({ name: "kill-node", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1", readyTimeoutMs: 60_000 });
    const big = pattern("node.bin", 300, 4);
    await app.objects.put(fromFile(big.file), { key: "big" });
    const [m] = await pool.members();
    const reading = pool.callMember(m!.executorId, "streamDigest", "big");
    const dir = await cacheDirOf(cluster, "kc");
    await receiving(dir, 20 * MiB);
    const agent = cluster.agents.get("kc")!;
    agent.kill("SIGKILL");
    await waitForExit("the killed agent", agent.pid!);
    await rejection(reading);
    const partial = filesEnding(dir, "").filter((f) => f.size >= 20 * MiB && f.size < 300 * MiB);
    assert.equal(partial.length, 1, "the killed node left its partial copy");
    await cluster.addAgent({ id: "kc", cpus: 2 });
    // The new agent removed what the killed one left (and said how much), so nothing partial can be served.
    const removed = /removed what a previous agent left in \S+ \((\d+) entries, ([\d.]+) (MiB|GiB)\)/.exec(cluster.headLog());
    assert.ok(removed && Number(removed[2]) * (removed[3] === "GiB" ? 1024 : 1) >= 20, `the restarted node removed the partial copy: ${removed?.[0] ?? "no such log line"}`);
    assert.deepEqual(filesEnding(dir, "").filter((f) => !f.file.endsWith(".hearth-node-cache")), [], "the restarted node cache holds no partial file");
    const next = await waitFor("an executor on the restarted agent", async () => (await pool.members()).find((x) => x.agentId === "kc"), 60_000);
    assert.equal((await pool.callMember(next.executorId, "streamDigest", "big")).sha256, big.sha);
    const st = (await pool.callMember(next.executorId, "nodeStat")) as unknown as NodeStat;
    assert.equal(st.fetches.bytesFromHead, 300 * MiB, "the copy was made again whole, from the head");
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
    await receiving(await cacheDirOf(cluster, "ke"), 20 * MiB);
    process.kill(who.pid, "SIGKILL");
    await rejection(reading);
    const next = await waitFor("a replacement executor", async () => (await pool.members()).find((x) => x.executorId !== m!.executorId), 60_000);
    assert.equal((await pool.callMember(next.executorId, "streamDigest", "big")).sha256, big.sha);
    const st = (await pool.callMember(next.executorId, "nodeStat")) as unknown as NodeStat;
    assert.equal(st.recent.filter((f) => f.key === "big").length, 1, "the node installed one copy, for both executors");
    // Not a copy aborted with the executor and made again: one fetch from the head, each byte once.
    assert.deepEqual([st.fetches.fromHead, st.fetches.bytesFromHead], [1, 300 * MiB], "the copy went on when its executor died, and was not made twice");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("a disk that fills mid-copy fails the copy naming the object and the disk, leaves no file of it, and loses nothing", { timeout: 120_000, skip: process.geteuid?.() === 0 ? false : "needs root: a real small disk is a mounted tmpfs" }, async () => {
  const { SmallDisk } = await import("../helpers/small-disk.js");
  const disk = SmallDisk.mount(32);
  // The executors' users must reach the cache dir when they run as their apps' own users.
  chmodSync(disk.dir, 0o711);
  const cluster = await startCluster({ agents: [] });
  // The node's link to the head goes through a relay that holds the copy half-way while the disk fills.
  const relay = await startStallRelay(cluster.endpoint);
  await cluster.addAgent({ id: "fd", cpus: 2, head: relay.endpoint, args: ["--cache-dir", path.join(disk.dir, "cache")] });
  const app = await connect({ name: "full-node", head: cluster.endpoint });
  const cacheFiles = () => filesEnding(path.join(disk.dir, "cache"), "").filter((f) => !f.file.endsWith(".hearth-node-cache"));
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1" });
    const big = pattern("full-big.bin", 24, 6);
    const small = pattern("full-small.bin", 4, 7);
    const huge = pattern("full-huge.bin", 40, 8);
    await app.objects.put(fromFile(big.file), { key: "big" });
    await app.objects.put(fromFile(small.file), { key: "small" });
    await app.objects.put(fromFile(huge.file), { key: "huge" });
    const [m] = await pool.members();

    // More than the disk has: refused before a byte moves.
    const tooBig = await rejection(pool.callMember(m!.executorId, "streamDigest", "huge"));
    assert.match(tooBig.error.message, /CacheFullError.*cannot store 40 MiB for 'huge': larger than the cache's file limit \(what its file system has free\)/);
    assert.deepEqual(cacheFiles(), [], "nothing of it was written");

    // Room for it when it starts; then the disk fills under the copy.
    relay.arm(12 * MiB);
    const reading = pool.callMember(m!.executorId, "streamDigest", "big");
    await relay.stalled();
    disk.fill();
    relay.release();
    const { error } = await rejection(reading);
    assert.match(error.message, /ObjectStorageError/);
    assert.match(error.message, /fetch of 'big' failed: this node's cache dir refused it \(ENOSPC/);
    // A node's first copy is written under its final name: no file of any name may be left of it.
    assert.deepEqual(cacheFiles(), [], "the refused copy left no file");
    disk.free();
    assert.equal((await pool.callMember(m!.executorId, "streamDigest", "small")).sha256, small.sha, "the node still copies what fits");
    assert.deepEqual(cacheFiles().map((f) => f.size), [4 * MiB], "the node holds the small copy and nothing of the big one");
    const h = createHash("sha256");
    for await (const c of app.objects.getStream("big")) h.update(c);
    assert.equal(h.digest("hex"), big.sha, "the head's copy is whole");
  } finally {
    relay.release();
    await app.close().catch(() => undefined);
    await cluster.stop();
    await relay.close();
    disk.unmount();
  }
});
