/**
 * Objects larger than any buffer a process may make. Every process of this
 * test (the driver, the head, both agents and their executors, which inherit
 * the variable) runs with HEARTH_MAX_BUFFER_BYTES=64m: a path that assembled
 * a 200 MiB object (or one of its parts) in one buffer fails with
 * BufferLimitError instead of passing. What a 6.17 GB publication meets at
 * Node's 4 GiB Buffer limit, these objects meet at 64 MiB.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";

process.env.HEARTH_MAX_BUFFER_BYTES = "64m"; // before anything reads it, here and in every process started below

import { objectBuffers } from "../../sdk/cache/buffers.js";
import { fromFile, fromParts, fromStream } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import { BufferLimitError, RemoteError } from "../../sdk/errors/index.js";
import type { App } from "../../sdk/runtime/app.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import { DEFAULT_REBASE, WeightPublisher } from "../../sdk/rl/services/weights.js";
import { TensorEngine } from "../../sdk/tensor/index.js";
import type { WeightsRollout } from "../../bench/weights-service.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, rejection, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { writePattern } from "../helpers/patterns.js";

const MiB = 1024 * 1024;
const LIMIT = 64 * MiB;
const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const ROLLOUT = { module: path.join(DIST, "bench/weights-service.js"), export: "WeightsRollout" };

let cluster: TestCluster;
let app: App;
let pool: PoolHandle<Streamer>;
let members: Array<{ executorId: string; agentId: string }>;
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-stream-"));

/** A process's peak RSS since its last reset (`clear_refs`), in MiB. */
function rssPeakMiB(pid: number): number {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]) / 1024;
}

/** Resets a process's peak RSS to its RSS now; returns that, in MiB. */
function resetPeakMiB(pid: number): number {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
  return rssPeakMiB(pid);
}

before(async () => {
  cluster = await startCluster({ agents: [{ id: "sa", cpus: 4 }, { id: "sb", cpus: 4 }] });
  app = await connect({ name: "stream", head: cluster.endpoint });
  pool = await app.service<Streamer>(STREAMER, { name: "streamer", warmup: 3, max: 3, resreq: "cpu=1" });
  members = (await pool.members()).map((m) => ({ executorId: m.executorId, agentId: m.agentId }));
  assert.equal(new Set(members.map((m) => m.agentId)).size, 2, "executors on both agents");
});

after(async () => {
  await app?.close().catch(() => undefined);
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("an object over four times the buffer limit streams into the cache and out to every executor; no process makes it whole", { timeout: 300_000 }, async () => {
  const SIZE = 300 * MiB;
  const big = path.join(work, "big.bin");
  const sha = writePattern(big, SIZE / MiB, 1);
  const watched = [["head", cluster.head], ...[...cluster.agents].map(([id, c]) => [`agent ${id}`, c] as const)] as const;
  const before = new Map(watched.map(([who, p]) => [who, resetPeakMiB(p.pid!)]));
  const ref = await app.objects.put(fromFile(big), { key: "big" });
  assert.equal(ref.size, SIZE);

  // Whole in memory: refused, naming the object, its size and the limit.
  const { error } = await rejection(app.objects.get("big"));
  assert.ok(error instanceof BufferLimitError, String(error));
  assert.deepEqual([error.key, error.size, error.limit], ["big", SIZE, LIMIT]);
  assert.match(error.message, /getStream, getToFile or getParts/);

  // The driver reads it as a file and as a stream.
  const back = path.join(work, "back.bin");
  assert.deepEqual(await app.objects.getToFile("big", back), { version: 1, size: SIZE });
  assert.equal(createHash("sha256").update(readFileSync(back)).digest("hex"), sha);
  const h = createHash("sha256");
  for await (const chunk of app.objects.getStream("big")) h.update(chunk);
  assert.equal(h.digest("hex"), sha);

  // Every executor: exact, read from its node's file (nothing of it over a socket), and refused whole.
  for (const m of members) {
    const r = await pool.callMember(m.executorId, "streamDigest", "big");
    assert.equal(r.sha256, sha, `${m.executorId}@${m.agentId} read the object exactly`);
    assert.equal(r.localBytes, SIZE, `${m.executorId} read it from its node's copy`);
    assert.ok(r.tcpBytes < MiB, `${m.executorId}: ${r.tcpBytes} bytes crossed a socket to it`);
    const whole = await rejection(pool.callMember(m.executorId, "whole", "big"));
    assert.ok(whole.error instanceof RemoteError && whole.error.remoteName === "BufferLimitError", String(whole.error));
  }

  // One copy per node, and the head sent it once: the second node copied it from the first.
  const sources: string[] = [];
  for (const agentId of ["sa", "sb"]) {
    const m = members.find((x) => x.agentId === agentId)!;
    const st = (await pool.callMember(m.executorId, "nodeStat")) as { recent: Array<{ key: string; source: string; bytes: number }> };
    const copies = st.recent.filter((f) => f.key === "big");
    assert.equal(copies.length, 1, `agent ${agentId} copied 'big' once for its executors`);
    sources.push(copies[0]!.source);
  }
  assert.deepEqual(sources.sort(), ["head", "peer"], "one node from the head, the other from that node");
  const status = await cluster.status();
  const toAgents = status.objects.traffic.bytesOutTo.agent as number;
  assert.ok(toAgents >= SIZE && toAgents < SIZE + 10 * MiB, `the head sent ${toAgents / MiB} MiB to agents for a ${SIZE / MiB} MiB object`);

  // No process made a buffer over the limit (their counters), and none held the object whole (their peak memory).
  assert.ok(objectBuffers.largest <= LIMIT, `the driver made a ${objectBuffers.largest}-byte object buffer`);
  const reported = await waitFor("every process's memory report", async () => {
    const s = await cluster.status();
    const ex = s.apps.find((a: any) => a.name === "stream").services.flatMap((sv: any) => sv.executors);
    const all = [s.head.memory, ...s.agents.map((a: any) => a.memory), ...ex.map((e: any) => e.memory)];
    return all.every((m: any) => m && typeof m.largestObjectBuffer === "number") ? all : undefined;
  });
  for (const m of reported) assert.ok(m.largestObjectBuffer <= LIMIT, `a process made a ${m.largestObjectBuffer}-byte object buffer`);
  // A few chunks in flight and the garbage of those already sent: a bounded amount, well under the object (measured: the
  // head's peak grows by ~100 MiB moving 200 MiB or 1 GiB alike).
  for (const [who, p] of watched) {
    const grew = rssPeakMiB(p.pid!) - before.get(who)!;
    assert.ok(grew < (2 / 3) * (SIZE / MiB), `${who}'s RSS peaked ${grew.toFixed(0)} MiB above where it was, moving a ${SIZE / MiB} MiB object`);
  }
});

test("a base of several parts commits whole: readers see the old parts until the last new one is in, then one file per part on each node", { timeout: 180_000 }, async () => {
  const files = [0, 1, 2].map((i) => path.join(work, `old-${i}.bin`));
  const oldSha = files.map((f, i) => writePattern(f, 24, 10 + i));
  await app.objects.put(fromParts(files.map((f) => fromFile(f))), { key: "shards" });
  const m = members[0]!;
  const first = await pool.callMember(m.executorId, "parts", "shards");
  assert.deepEqual(first.parts.map((p) => p.sha256), oldSha);
  assert.ok(first.parts.every((p) => p.file !== undefined && /\/(hearth-)?cache(-s[ab](-[0-9a-f]{10})?)?\//.test(p.file)), `each part is a file of the node's cache: ${JSON.stringify(first.parts.map((p) => p.file))}`);

  // A new base whose second part is still being produced: nothing of it is visible yet.
  const newFiles = [0, 2].map((i) => path.join(work, `new-${i}.bin`));
  const newSha0 = writePattern(newFiles[0]!, 20, 20);
  const newSha2 = writePattern(newFiles[1]!, 20, 22);
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let produced = false;
  const middle = fromStream(
    (async function* () {
      yield Buffer.alloc(5 * MiB, 1);
      produced = true;
      await gate;
      yield Buffer.alloc(5 * MiB, 2);
    })(),
  );
  const writing = app.objects.update("shards", fromParts([fromFile(newFiles[0]!), middle, fromFile(newFiles[1]!)]));
  await waitFor("the second part to be under way", () => (produced ? true : undefined));
  for (const x of members) {
    const during = await pool.callMember(x.executorId, "parts", "shards");
    assert.deepEqual(during.parts.map((p) => p.sha256), oldSha, `${x.executorId} still reads the whole old base`);
  }
  release();
  const ref = await writing;
  assert.equal(ref.version, 2);
  const middleSha = createHash("sha256").update(Buffer.alloc(5 * MiB, 1)).update(Buffer.alloc(5 * MiB, 2)).digest("hex");
  for (const x of members) {
    const after = await pool.callMember(x.executorId, "parts", "shards");
    assert.deepEqual(after.parts.map((p) => p.sha256), [newSha0, middleSha, newSha2], `${x.executorId} reads the whole new base`);
  }
});

test("a weights publication larger than the buffer limit reaches every rollout exact, base and patch", { timeout: 300_000 }, async () => {
  const engine = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  const rollouts = await app.service<WeightsRollout>(ROLLOUT, { name: "rollout", warmup: 2, max: 2, resreq: "cpu=1" });
  try {
    // 150 MiB of bf16 in 32 MiB tensors, shipped as 48 MiB shards: the base is more than twice the limit.
    const config = { synthetic_bytes: 150 * MiB, tensor_elements: 16 * MiB };
    await engine.initModel({ config, seed: 3, dtype: "bfloat16", device: "cpu", threads: 1 });
    const readers = await rollouts.members();
    assert.equal(new Set(readers.map((r) => r.agentId)).size, 2, "rollouts on both agents");
    for (const r of readers) await rollouts.callMember(r.executorId, "setup", { ...config, zeros: true }, 1);
    const publisher = new WeightPublisher(app.objects, "weights", engine, DEFAULT_REBASE, { maxShardBytes: 48 * MiB });
    const base = await publisher.publish();
    assert.equal(base.kind, "full");
    for (const step of [0, 1]) {
      if (step === 1) {
        await engine.perturb({ share: 0.027, seed: 9 });
        assert.equal((await publisher.publish()).kind, "patch");
      }
      const want = (await engine.digest()).digest;
      for (const r of readers) {
        const sync = await rollouts.callMember(r.executorId, "sync", "weights");
        assert.deepEqual(sync.applied, [step === 0 ? "full" : "patch"], `${r.executorId}: what it applied`);
        assert.equal((await rollouts.callMember(r.executorId, "digest")).digest, want, `${r.executorId}@${r.agentId} holds the published weights exactly`);
        if (step === 0) assert.ok(sync.bytes < MiB, `${r.executorId}: the base was read from the node's files (${sync.bytes} bytes over a socket)`);
      }
    }
    assert.ok(objectBuffers.largest <= LIMIT);
  } finally {
    await engine.close();
  }
});
