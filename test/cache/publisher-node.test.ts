/**
 * The publisher's node keeps the publication as its copy (real head, agents
 * and executors): a WeightPublisher on node ka ships its shard files to the
 * head, and ka's node cache takes each file as it reached the head (a link,
 * or a checked local copy) and installs them at the commit.
 *
 * - ka's executors then read the publication with no byte fetched for it
 *   (ka's counters: nothing from the head or peers; the head's: nothing
 *   sent to agents), and another node copies the base from ka, not the head.
 * - A write that fails after a part was kept leaves nothing kept on the node.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";

const MiB = 1024 * 1024;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };

interface NodeStat {
  fetches: { started: number; fromHead: number; fromPeers: number; bytesFromHead: number; bytesFromPeers: number; kept: number; bytesKept: number };
  recent: Array<{ key: string; version: number; source: string }>;
  keptBytes: number;
}

const stat = async (pool: PoolHandle<Streamer>, executorId: string): Promise<NodeStat> => (await pool.callMember(executorId, "nodeStat")) as unknown as NodeStat;
const headToAgents = async (cluster: TestCluster): Promise<number> => ((await cluster.status()).objects.traffic.bytesOutTo.agent as number | undefined) ?? 0;
/** Gets the head answered with data (full or patches), and those that asked only what the object is. */
const headGets = async (cluster: TestCluster): Promise<{ data: number; meta: number }> => {
  const g = (await cluster.status()).objects.traffic.gets as { full: number; patches: number; meta: number };
  return { data: g.full + g.patches, meta: g.meta };
};

async function perAgent(app: Awaited<ReturnType<typeof connect>>, ids: string[]): Promise<{ pool: PoolHandle<Streamer>; on: Record<string, string> }> {
  const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: ids.length, max: ids.length, resreq: "cpu=2", concurrency: 4 });
  const members = await pool.members();
  const on = Object.fromEntries(ids.map((id) => [id, members.find((m) => m.agentId === id)!.executorId]));
  return { pool, on };
}

test("the publisher's node keeps the shard files as its copy: it fetches nothing of them, and another node copies the base from it", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "ka", cpus: 2 }, { id: "kb", cpus: 2 }] });
  const app = await connect({ name: "keep", head: cluster.endpoint });
  try {
    const { pool, on } = await perAgent(app, ["ka", "kb"]);
    const before = await headToAgents(cluster);
    const gets0 = await headGets(cluster);
    // The last shard small (a part the node keeps in memory: its bytes go to the node over loopback).
    const shards = [{ mib: 24, seed: 1 }, { mib: 24, seed: 2 }, { mib: 16, seed: 3 }, { bytes: 4096, seed: 4 }];
    const total = 64 * MiB + 4096;
    const pub = await pool.callMember(on.ka!, "publishShards", "weights", shards);
    assert.equal(pub.bytesKeptByNode, total, "ka's node kept every shard");
    // Read on ka: its node holds the publication already.
    const onKa = await pool.callMember(on.ka!, "streamDigest", "weights");
    assert.equal(onKa.size, total);
    const ka = await stat(pool, on.ka!);
    assert.deepEqual([ka.fetches.bytesFromHead, ka.fetches.bytesFromPeers], [0, 0], "ka fetched no byte of the publication");
    assert.deepEqual([ka.fetches.kept, ka.fetches.bytesKept, ka.keptBytes], [1, total, 0]);
    assert.equal(ka.recent.find((f) => f.key === "weights")?.source, "kept");
    assert.equal((await headToAgents(cluster)) - before, 0, "the head sent no agent a byte");
    // The install asked the head what the object is (its parts and sums), with no data get and no read transfer:
    // a data get counted here is one a host's fetch counts on (test/slurm/searchr1.test.ts: one per node a publication).
    const gets1 = await headGets(cluster);
    assert.deepEqual([gets1.data - gets0.data, gets1.meta - gets0.meta], [0, 1], "ka's install made one metadata get and no data get");
    // kb: the base from ka (the head's tree has ka as a holder), nothing from the head.
    const onKb = await pool.callMember(on.kb!, "streamDigest", "weights");
    const kb = await stat(pool, on.kb!);
    assert.deepEqual([kb.fetches.bytesFromPeers, kb.fetches.bytesFromHead], [total, 0], "kb copied the base from ka");
    assert.equal((await headToAgents(cluster)) - before, 0, "the head still sent no agent a byte");
    // Both copies are the publication the head holds (read by the driver from the head).
    const h = createHash("sha256");
    for await (const chunk of app.objects.getStream("weights")) h.update(chunk);
    const sha = h.digest("hex");
    assert.deepEqual([onKa.sha256, onKb.sha256], [sha, sha]);
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("a write that fails after a part was kept leaves nothing kept on the node, and nothing is installed", { timeout: 120_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "fa", cpus: 2 }] });
  const app = await connect({ name: "keep-fail", head: cluster.endpoint });
  try {
    const { pool, on } = await perAgent(app, ["fa"]);
    const r = await pool.callMember(on.fa!, "putFailing", "broken", 16);
    assert.match(r.message, /the producer failed/);
    assert.equal(r.keptWhile, 16 * MiB, "the node had kept the first part when the write went on");
    await waitFor("the node to drop the kept part", async () => ((await stat(pool, on.fa!)).keptBytes === 0 ? true : undefined));
    const st = await stat(pool, on.fa!);
    assert.deepEqual([st.fetches.kept, st.fetches.bytesKept], [0, 0]);
    await assert.rejects(app.objects.get("broken"), /broken/);
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});
