/**
 * How a base reaches the nodes (real head, agents and executors): the head
 * sends it once, and nodes pass it on in a tree while they still receive it.
 *
 * - A late joiner after four patches copies the base from a node that holds
 *   it (the tree is the base's, not the version's): the head sends it only
 *   the patches that node lacks, and nothing once a node holds the version
 *   (its byte counters say so).
 * - A node serves a copy while it receives it: with node a's link to the
 *   head held half-way (a relay), node b's copy from a has bytes while a's
 *   own copy is still incomplete (both nodes' counters, not b's result).
 * - A dead peer is dropped at once (its connection's disconnect, not a
 *   deadline) and a hung one after PEER_STALL_MS; the nodes below it find
 *   new parents (the head re-parents them, never under themselves) and finish
 *   exactly.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { PEER_STALL_MS } from "../../cluster-agent/node-peers.js";
import { fromFile } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, startCluster, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";
import { writePattern } from "../helpers/patterns.js";
import { startStallRelay, type StallRelay } from "../helpers/stall-relay.js";

const MiB = 1024 * 1024;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-distribution-"));

after(() => rmSync(work, { recursive: true, force: true }));

/** A node cache's counters, as its obj-stat says them. */
interface NodeStat {
  fetches: { fromHead: number; fromPeers: number; peerFailures: number; bytesFromHead: number; bytesFromPeers: number };
  recent: Array<{ key: string; version: number; source: string }>;
  receiving: Array<{ key: string; version: number; bytes: number; written: number; source: string }>;
}

function pattern(name: string, mib: number, seed: number): { file: string; sha: string } {
  const file = path.join(work, name);
  return { file, sha: writePattern(file, mib, seed) };
}

/** One executor per agent of `ids` (each agent has 2 cpus, each executor takes them). */
async function perAgent(app: Awaited<ReturnType<typeof connect>>, ids: string[]): Promise<{ pool: PoolHandle<Streamer>; on: Record<string, string> }> {
  const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: ids.length, max: ids.length, resreq: "cpu=2", concurrency: 4 });
  const members = await pool.members();
  const on = Object.fromEntries(ids.map((id) => [id, members.find((m) => m.agentId === id)!.executorId]));
  return { pool, on };
}

const stat = async (pool: PoolHandle<Streamer>, executorId: string): Promise<NodeStat> => (await pool.callMember(executorId, "nodeStat")) as unknown as NodeStat;
const headToAgents = async (cluster: TestCluster): Promise<number> => ((await cluster.status()).objects.traffic.bytesOutTo.agent as number | undefined) ?? 0;

test("late joiners after four patches copy the base from a peer: the head sends them only the patches a peer lacks, and nothing when a peer holds the version", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "la", cpus: 2 }, { id: "lb", cpus: 2 }, { id: "lc", cpus: 2 }] });
  const app = await connect({ name: "late", head: cluster.endpoint });
  try {
    const { pool, on } = await perAgent(app, ["la", "lb", "lc"]);
    const base = pattern("base.bin", 48, 1);
    await app.objects.put(fromFile(base.file), { key: "w" });
    await pool.callMember(on.la!, "streamDigest", "w");
    // Four patches of 2 MiB (each a file part): node la takes the first two as they come, then not the last two.
    for (let i = 0; i < 4; i++) {
      await app.objects.patch("w", Buffer.alloc(2 * MiB, 10 + i));
      if (i < 2) await pool.callMember(on.la!, "streamDigest", "w");
    }
    // lb: the base from la (which holds it, at an older version), the four patches from the head.
    let sentBefore = await headToAgents(cluster);
    const late = await pool.callMember(on.lb!, "streamDigest", "w");
    assert.equal(late.size, 56 * MiB);
    let sent = (await headToAgents(cluster)) - sentBefore;
    assert.equal(sent, 8 * MiB, `the head sent lb ${sent / MiB} MiB: the four patches, not the 48 MiB base`);
    let st = await stat(pool, on.lb!);
    assert.equal(st.recent.filter((f) => f.key === "w").at(-1)?.source, "peer");
    assert.deepEqual([st.fetches.bytesFromPeers, st.fetches.bytesFromHead], [48 * MiB, 8 * MiB], "the base came from a peer, the patches from the head");
    // lc: a peer holds this very version (lb, or la once it caught up): everything from peers, nothing from the head.
    await pool.callMember(on.la!, "streamDigest", "w");
    sentBefore = await headToAgents(cluster);
    const third = await pool.callMember(on.lc!, "streamDigest", "w");
    sent = (await headToAgents(cluster)) - sentBefore;
    assert.equal(sent, 0, `the head sent lc ${sent / MiB} MiB`);
    st = await stat(pool, on.lc!);
    assert.deepEqual([st.fetches.bytesFromPeers, st.fetches.bytesFromHead], [56 * MiB, 0], "lc's copy came whole from a peer");
    const holder = await pool.callMember(on.la!, "streamDigest", "w");
    assert.deepEqual([late.sha256, third.sha256], [holder.sha256, holder.sha256], "the late joiners' copies equal the holder's");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("a node serves a copy while it still receives it", { timeout: 180_000 }, async (t) => {
  const cluster = await startCluster({ agents: [] });
  const relay = await startStallRelay(cluster.endpoint);
  t.after(() => relay.release());
  await cluster.addAgent({ id: "sa", cpus: 2, head: relay.endpoint });
  await cluster.addAgent({ id: "sb", cpus: 2 });
  const app = await connect({ name: "pass-through", head: cluster.endpoint });
  try {
    const { pool, on } = await perAgent(app, ["sa", "sb"]);
    const big = pattern("pass.bin", 64, 2);
    await app.objects.put(fromFile(big.file), { key: "big" });
    relay.arm(16 * MiB);
    const readingA = pool.callMember(on.sa!, "streamDigest", "big");
    readingA.catch(() => undefined);
    await relay.stalled();
    const readingB = pool.callMember(on.sb!, "streamDigest", "big");
    readingB.catch(() => undefined);
    // b's copy from a has bytes, while a's own copy is incomplete and held there by the relay.
    const seen = await waitFor("node sb to receive from sa while sa still receives", async () => {
      const [a, b] = await Promise.all([stat(pool, on.sa!), stat(pool, on.sb!)]);
      const bCopy = b.receiving.find((c) => c.key === "big");
      const aCopy = a.receiving.find((c) => c.key === "big");
      return bCopy && bCopy.written > 0 && aCopy && aCopy.written < aCopy.bytes ? { a: aCopy, b: bCopy } : undefined;
    });
    assert.equal(seen.b.source, "peer sa", "sb copies from sa");
    assert.ok(relay.isStalled(), "sa's own copy was still held when sb had bytes of it");
    assert.ok(seen.b.written <= seen.a.written, "sb has no more than sa had");
    relay.release();
    const [a, b] = await Promise.all([readingA, readingB]);
    assert.deepEqual([a.sha256, b.sha256], [big.sha, big.sha]);
  } finally {
    relay.release();
    await app.close().catch(() => undefined);
    await cluster.stop();
    await relay.close();
  }
});

/** Three nodes: pa (its head link held half-way by a relay), pb and pc, which the head hangs under pa. */
async function treeUnderStalledNode(name: string): Promise<{ cluster: TestCluster; relay: StallRelay; app: Awaited<ReturnType<typeof connect>>; pool: PoolHandle<Streamer>; on: Record<string, string>; sha: string; reads: Record<string, Promise<{ sha256: string }>> }> {
  const cluster = await startCluster({ agents: [] });
  const relay = await startStallRelay(cluster.endpoint);
  await cluster.addAgent({ id: "pa", cpus: 2, head: relay.endpoint });
  await cluster.addAgent({ id: "pb", cpus: 2 });
  await cluster.addAgent({ id: "pc", cpus: 2 });
  const app = await connect({ name, head: cluster.endpoint });
  const { pool, on } = await perAgent(app, ["pa", "pb", "pc"]);
  const big = pattern(`${name}.bin`, 64, 3);
  await app.objects.put(fromFile(big.file), { key: "big" });
  relay.arm(16 * MiB);
  const reads: Record<string, Promise<{ sha256: string }>> = { pa: pool.callMember(on.pa!, "streamDigest", "big") };
  reads.pa!.catch(() => undefined);
  await relay.stalled();
  reads.pb = pool.callMember(on.pb!, "streamDigest", "big");
  reads.pc = pool.callMember(on.pc!, "streamDigest", "big");
  // Both copy from pa (fan-out 2) and have what pa had.
  await waitFor("pb and pc copying from pa", async () => {
    const all = await Promise.all([stat(pool, on.pb!), stat(pool, on.pc!)]);
    return all.every((s) => s.receiving.some((c) => c.key === "big" && c.source === "peer pa" && c.written > 0)) ? true : undefined;
  });
  return { cluster, relay, app, pool, on, sha: big.sha, reads };
}

test("a dead peer is dropped at its connection's disconnect: the nodes below it are re-parented and finish exactly", { timeout: 180_000 }, async () => {
  const { cluster, relay, app, pool, on, sha, reads } = await treeUnderStalledNode("dead-peer");
  try {
    const pa = cluster.agents.get("pa")!;
    pa.kill("SIGKILL");
    await waitForExit("node pa", pa.pid!);
    const [b, c] = await Promise.all([reads.pb!, reads.pc!]);
    assert.deepEqual([b.sha256, c.sha256], [sha, sha]);
    for (const id of ["pb", "pc"]) {
      const st = await stat(pool, on[id]!);
      assert.ok(st.fetches.peerFailures >= 1, `${id} saw pa fail`);
    }
    const log = cluster.headLog();
    const failures = log.split("\n").filter((l) => /from agent pa .* failed/.test(l));
    assert.ok(failures.length >= 2, `pb and pc reported pa: ${failures.join(" / ")}`);
    assert.ok(failures.every((l) => /connection to the node cache at .* dropped/.test(l)), `each at pa's disconnect, not a deadline: ${failures.join(" / ")}`);
  } finally {
    relay.release();
    await app.close().catch(() => undefined);
    await cluster.stop();
    await relay.close();
  }
});

test("a hung peer is dropped after the stall deadline: the nodes below it are re-parented and finish exactly", { timeout: 180_000 }, async () => {
  const { cluster, relay, app, pool, on, sha, reads } = await treeUnderStalledNode("hung-peer");
  const pa = cluster.agents.get("pa")!;
  try {
    pa.kill("SIGSTOP");
    const [b, c] = await Promise.all([reads.pb!, reads.pc!]);
    assert.deepEqual([b.sha256, c.sha256], [sha, sha]);
    for (const id of ["pb", "pc"]) assert.ok((await stat(pool, on[id]!)).fetches.peerFailures >= 1, `${id} gave up on pa`);
    const failures = cluster.headLog().split("\n").filter((l) => /from agent pa .* failed/.test(l));
    assert.ok(failures.length >= 2 && failures.every((l) => new RegExp(`within ${PEER_STALL_MS / 1000} s`).test(l)), `each after the stall deadline: ${failures.join(" / ")}`);
  } finally {
    pa.kill("SIGCONT");
    relay.release();
    await app.close().catch(() => undefined);
    await cluster.stop();
    await relay.close();
  }
});
