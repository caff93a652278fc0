/**
 * What a killed process leaves is found and removed by the next start, and
 * counted against the limits while it lives (real head, agents, executors):
 *
 * - kill -9 of a head without a data dir mid-upload leaves its spool (the
 *   upload's file in it); the next head on the same spool parent removes it;
 * - kill -9 of an executor in the middle of a publication leaves the
 *   publisher's scratch (a shard file): its agent removes it once the
 *   executor has exited; an agent killed with -9 leaves its executors'
 *   scratch, which the next agent removes at start;
 * - a node's shipped folder whose object the cache dropped keeps the bytes on
 *   disk (a hard link): the node counts them, and drops the folder when a
 *   new copy needs the room, so the cache dir never holds more than its limit.
 *
 * Each kill waits for a signal (a file growing, a file present), never a time.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { shipFolder } from "../../sdk/cache/folder.js";
import { fromFile } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, rejection, startCluster, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";
import { writePattern } from "../helpers/patterns.js";
import { OWNER_FILE } from "../../cluster-agent/pids.js";

const MiB = 1024 * 1024;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-leaks-"));

after(() => rmSync(work, { recursive: true, force: true }));

/** Files under `dir` (recursively) with their sizes. */
function filesUnder(dir: string): Array<{ file: string; size: number }> {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return filesUnder(p);
    try {
      return [{ file: p, size: statSync(p).size }];
    } catch {
      return [];
    }
  });
}

/** Bytes of distinct files (by inode) under `dir`: what it holds on disk. */
function bytesUnder(dir: string): number {
  const seen = new Set<string>();
  let n = 0;
  for (const f of filesUnder(dir)) {
    const st = statSync(f.file);
    const id = `${st.dev}:${st.ino}`;
    if (!seen.has(id)) n += st.size;
    seen.add(id);
  }
  return n;
}

/** Agent `id`'s node cache folder and usage, as its heartbeat reports them. */
async function nodeCache(cluster: TestCluster, id: string): Promise<{ dir: string; fileBytes: number; objects: number }> {
  return waitFor(`agent ${id}'s cache report`, async () => (await cluster.status()).agents.find((a: any) => a.id === id)?.cache ?? undefined);
}

test("kill -9 of a head without a data dir mid-upload: the next head removes the spool it left", { timeout: 180_000 }, async () => {
  const spools = path.join(work, "spools");
  const first = await startCluster({ agents: [], headArgs: ["--spool-dir", spools] });
  const app = await connect({ name: "leak-head", head: first.endpoint });
  let second: TestCluster | undefined;
  try {
    const big = path.join(work, "big.bin");
    writePattern(big, 300, 1);
    const writing = app.objects.put(fromFile(big), { key: "big" });
    await waitFor("the upload under way in the spool", () => (filesUnder(spools).some((f) => f.file.endsWith(".receiving") && f.size >= 20 * MiB) ? true : undefined), 60_000);
    first.head.kill("SIGKILL");
    await waitForExit("the killed head", first.head.pid!);
    await rejection(writing);
    const left = readdirSync(spools);
    assert.equal(left.length, 1, `the killed head left its spool: ${left.join(", ")}`);
    assert.ok(filesUnder(spools).some((f) => f.size >= 20 * MiB), "with the upload's bytes in it");
    second = await startCluster({ agents: [], headArgs: ["--spool-dir", spools] });
    const now = readdirSync(spools);
    assert.ok(!now.includes(left[0]!), `the next head removed the spool the killed one left (${now.join(", ")})`);
    const st = await second.status();
    assert.equal(path.dirname(st.objects.spool.dir), spools, "its own spool is there, and status names it");
    assert.deepEqual(filesUnder(spools).filter((f) => path.basename(f.file) !== OWNER_FILE), [], "nothing of the killed head's upload remains (the new spool holds only its owner's stamp)");
    assert.match(second.headLog(), /removed the spool a killed head left/);
  } finally {
    await app.close().catch(() => undefined);
    await first.stop();
    await second?.stop();
  }
});

test("kill -9 of a publishing executor: its agent removes its scratch; kill -9 of the agent: the next one does", { timeout: 180_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "lp", cpus: 2 }] });
  const app = await connect({ name: "leak-publisher", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1", readyTimeoutMs: 60_000 });
    const [m] = await pool.members();
    const first = await pool.callMember(m!.executorId, "publishStuck");
    assert.ok(first.scratch.startsWith(first.tmpdir), `the publisher's scratch ${first.scratch} is in the executor's own temp folder ${first.tmpdir}`);
    assert.ok(existsSync(path.join(first.scratch, "shard-0.safetensors")));
    process.kill(first.pid, "SIGKILL");
    await waitFor("the dead executor's temp folder to be removed", () => (existsSync(first.tmpdir) ? undefined : true), 30_000);

    // Now the agent itself: its executor exits with it, and the scratch stays until the next agent starts.
    const next = await waitFor("a replacement executor", async () => (await pool.members()).find((x) => x.executorId !== m!.executorId), 60_000);
    const second = await pool.callMember(next.executorId, "publishStuck");
    const agent = cluster.agents.get("lp")!;
    agent.kill("SIGKILL");
    await waitForExit("the killed agent", agent.pid!);
    await waitForExit("its executor", second.pid, 30_000);
    assert.ok(existsSync(path.join(second.scratch, "shard-0.safetensors")), "the killed agent's executor left its scratch");
    await cluster.addAgent({ id: "lp", cpus: 2 });
    assert.equal(existsSync(second.tmpdir), false, `the next agent removed it at start (${second.tmpdir})`);
    assert.match(cluster.headLog(), /removed the temp folders of 1 executor\(s\) of an agent that is gone/);
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});

test("a node's folder whose object the cache dropped is counted against the cache's limit, and goes when room is needed", { timeout: 180_000 }, async () => {
  const limit = 100 * MiB;
  const cluster = await startCluster({ agents: [{ id: "lf", cpus: 2, args: ["--cache-limit", "100m"] }] });
  const app = await connect({ name: "leak-folder", head: cluster.endpoint });
  try {
    const pool = await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, max: 1, resreq: "cpu=1" });
    const [m] = await pool.members();
    const model = mkdtempSync(path.join(work, "model-"));
    writePattern(path.join(model, "weights.bin"), 60, 2);
    const ref = await shipFolder(app.objects, model, { objects: true, forceObjects: true });
    const opened = await pool.callMember(m!.executorId, "folder", ref);
    assert.equal(opened.inPlace, false, "the node made the folder from its copies");
    const dir = (await nodeCache(cluster, "lf")).dir;
    // The folder's object goes from the head, and so from the node: the folder's hard link keeps its 60 MiB.
    assert.ok((await app.objects.delete("")) >= 1);
    const held = await waitFor("the node to count the folder's bytes", async () => {
      const c = await nodeCache(cluster, "lf");
      return c.objects === 0 && c.fileBytes >= 60 * MiB ? c : undefined;
    });
    assert.ok(held.fileBytes <= bytesUnder(dir), `the node counts ${held.fileBytes} bytes, and its folder holds ${bytesUnder(dir)} on disk`);

    // A 70 MiB copy needs the room: the folder goes, and the cache dir never holds more than its limit.
    const big = path.join(work, "next.bin");
    const sha = writePattern(big, 70, 3);
    await app.objects.put(fromFile(big), { key: "next" });
    assert.equal((await pool.callMember(m!.executorId, "streamDigest", "next")).sha256, sha);
    assert.ok(bytesUnder(dir) <= limit, `the cache dir holds ${bytesUnder(dir) / MiB} MiB, over its ${limit / MiB} MiB limit`);
    assert.equal(existsSync(opened.dir), false, "the folder was dropped to make room");
  } finally {
    await app.close().catch(() => undefined);
    await cluster.stop();
  }
});
