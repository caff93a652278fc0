/**
 * Nodes copy a new base while it uploads (real head, agents and executors):
 * a driver updates a three-part object the three nodes hold, and stops
 * after the second part until the test lets it go on.
 *
 * - Before the commit every node has copied the first two parts (its
 *   counters), and its executors still read the old version (a copy ahead
 *   is invisible until the commit).
 * - After the commit each node installs its copy ahead ("precopy"), every
 *   executor reads the new bytes, and the head sent each part once (its
 *   bytes to agents: 1.00x the object), the nodes passing it on.
 * - An upload dropped after a sealed part leaves no copy ahead behind: the
 *   nodes drop it and its files.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { fromParts, fromStream } from "../../sdk/cache/object-cache.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";

const MiB = 1024 * 1024;
const PART = 12 * MiB;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const NODES = ["pa", "pb", "pc"];

interface NodeStat {
  fetches: { precopiedParts: number; precopied: number; precopiesDropped: number; bytesFromHead: number; bytesFromPeers: number };
  recent: Array<{ key: string; version: number; source: string }>;
}

const stat = async (pool: PoolHandle<Streamer>, executorId: string): Promise<NodeStat> => (await pool.callMember(executorId, "nodeStat")) as unknown as NodeStat;
const headToAgents = async (cluster: TestCluster): Promise<number> => ((await cluster.status()).objects.traffic.bytesOutTo.agent as number | undefined) ?? 0;

/** Part `i` of version `v`: bytes no other part or version has. */
function part(v: number, i: number): Buffer {
  const b = Buffer.alloc(PART);
  for (let at = 0; at < PART; at += 4) b.writeUInt32LE((at * 2654435761 + v * 97 + i * 31) >>> 0, at);
  return b;
}

function sha(parts: Buffer[]): string {
  const h = createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest("hex");
}

const one = (b: Buffer): ReturnType<typeof fromStream> =>
  fromStream(
    (async function* () {
      yield b;
    })(),
  );

/** Files a node cache holds under `dir` whose copy is not installed. */
function receivingFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((n) => n.endsWith(".receiving"));
}

test("nodes copy a base's parts while it uploads: invisible until the commit, installed at it, the head sending each part once", { timeout: 240_000 }, async () => {
  const cluster = await startCluster({ agents: NODES.map((id) => ({ id, cpus: 2 })) });
  const app = await connect({ name: "precopy", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: NODES.length, max: NODES.length, resreq: "cpu=2", concurrency: 4 });
    const members = await pool.members();
    const on = NODES.map((id) => members.find((m) => m.agentId === id)!.executorId);
    const v1 = [0, 1, 2].map((i) => part(1, i));
    await app.objects.put(fromParts(v1.map(one)), { key: "w" });
    // Every node holds version 1 (its executor read it).
    for (const e of on) assert.equal((await pool.callMember(e, "streamDigest", "w")).sha256, sha(v1));
    const before = await headToAgents(cluster);
    let peersBefore = 0;
    for (const e of on) peersBefore += (await stat(pool, e)).fetches.bytesFromPeers;

    const v2 = [0, 1, 2].map((i) => part(2, i));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const updating = app.objects.update(
      "w",
      fromParts(
        (async function* () {
          yield one(v2[0]!);
          yield one(v2[1]!);
          await gate;
          yield one(v2[2]!);
        })(),
      ),
    );
    try {
      for (const e of on) await waitFor(`node of ${e} to copy two parts ahead`, async () => ((await stat(pool, e)).fetches.precopiedParts >= 2 ? true : undefined), 60_000);
      // Not committed: every executor still reads version 1, and the copies ahead stay.
      for (const e of on) assert.equal((await pool.callMember(e, "streamDigest", "w")).sha256, sha(v1), "a copy ahead is invisible before the commit");
      for (const e of on) assert.equal((await stat(pool, e)).fetches.precopiesDropped, 0, "a read before the commit keeps the copy ahead");
    } finally {
      release();
    }
    const ref = await updating;
    assert.equal(ref.version, 2);
    for (const e of on) assert.equal((await pool.callMember(e, "streamDigest", "w")).sha256, sha(v2));
    let fromPeers = 0;
    for (const [i, e] of on.entries()) {
      const st = await stat(pool, e);
      assert.equal(st.recent.findLast((f) => f.key === "w")?.source, "precopy", `node ${NODES[i]} installed its copy ahead`);
      assert.equal(st.fetches.precopied, 1);
      assert.equal(st.fetches.precopiedParts, 3, `node ${NODES[i]} copied all three parts ahead`);
      fromPeers += st.fetches.bytesFromPeers;
    }
    assert.equal((await headToAgents(cluster)) - before, 3 * PART, "the head sent each part once");
    assert.equal(fromPeers - peersBefore, 2 * 3 * PART, "the other two nodes took every part from a peer");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("an upload dropped after a sealed part leaves no copy ahead on the nodes", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "da", cpus: 2 }] });
  const app = await connect({ name: "precopy-drop", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=2", concurrency: 4 });
    const [member] = await pool.members();
    const e = member!.executorId;
    const v1 = [0, 1].map((i) => part(1, i));
    await app.objects.put(fromParts(v1.map(one)), { key: "w" });
    assert.equal((await pool.callMember(e, "streamDigest", "w")).sha256, sha(v1));
    // Reported with the agent's heartbeats.
    const dir = await waitFor("the agent to report its cache dir", async () => (await cluster.status()).agents.find((a: { id: string }) => a.id === "da")?.cache?.dir as string | undefined);

    let fail!: (err: Error) => void;
    const failed = new Promise<never>((_, reject) => (fail = reject));
    const updating = app.objects.update(
      "w",
      fromParts(
        (async function* () {
          yield one(part(3, 0));
          await failed;
        })(),
      ),
    );
    await waitFor("the node to copy the sealed part ahead", async () => ((await stat(pool, e)).fetches.precopiedParts >= 1 ? true : undefined), 60_000);
    assert.ok(receivingFiles(dir).length > 0, "the copy ahead is a file on the node while the upload runs");
    fail(new Error("the producer failed"));
    await assert.rejects(updating, /the producer failed/);
    await waitFor("the node to drop the copy ahead", async () => ((await stat(pool, e)).fetches.precopiesDropped === 1 ? true : undefined), 30_000);
    assert.deepEqual(receivingFiles(dir), [], "no file of the copy ahead is left");
    assert.equal((await pool.callMember(e, "streamDigest", "w")).sha256, sha(v1), "the node still serves version 1");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});
