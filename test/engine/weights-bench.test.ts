/**
 * The `bench weights` code path at the tiny shape (real head, two agents,
 * three rollout executors with real engines, the real publisher): every
 * executor bit-identical to the publisher after every step, a late joiner
 * catches up through the patch history, patches cost well under the
 * reference's 6 bytes per changed value, a tensor moved past a third goes
 * dense, and the full-weights peer moves the whole model. Properties, not
 * times.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { REFERENCE_BYTES_PER_CHANGE, REPUBLICATION, runWeightsBench } from "../../bench/weights.js";
import { connect } from "../../sdk/connect.js";
import { applyPublications, WeightPublisher } from "../../sdk/rl/services/weights.js";
import { TensorEngine } from "../../sdk/tensor/index.js";
import { rejection, startCluster } from "../helpers/cluster.js";

test("bench weights at the tiny shape: bit-identical executors, late joiner, bytes, dense fallback", { timeout: 300_000 }, async () => {
  const r = await runWeightsBench({ shape: "tiny", threads: 1 });
  const agents = new Set(Object.values(r.placement));
  assert.equal(Object.keys(r.placement).length, 3);
  assert.equal(agents.size, 3, "one executor on each of three agents");

  for (const s of r.steps) {
    assert.ok(s.identical, `${s.name}: every executor's digest equals the publisher's`);
    assert.equal(s.executors.length, 3);
    for (const e of s.executors) assert.equal(e.version, s.version, `${s.name}: ${e.executorId} reached the published version`);
  }
  const byName = (name: string) => r.steps.find((s) => s.name === name)!;
  const full = byName("full-weights path (first publication)");
  const patch = byName("patch 2.7 %");
  assert.equal(full.kind, "full");
  for (const e of full.executors) assert.deepEqual(e.applied, ["full"], "the full-weights peer applies a whole base");
  assert.equal(patch.kind, "patch");
  for (const e of patch.executors) {
    assert.deepEqual(e.applied, ["patch"], "an executor at the previous version applies only the new patch");
    assert.ok(e.bytes < full.bytes / 10, `${e.executorId} fetched ${e.bytes} bytes for a 2.7 % patch (the base is ${full.bytes})`);
  }
  assert.ok(Math.abs(patch.changed / patch.elements - 0.027) < 0.003, `changed share ${patch.changed / patch.elements}`);
  assert.equal(patch.denseTensors, 0);
  for (const name of ["patch 2.7 %", "patch 10 %"]) {
    const s = byName(name);
    assert.ok(s.bytesPerChanged <= 0.5 * REFERENCE_BYTES_PER_CHANGE, `${name}: ${s.bytesPerChanged.toFixed(2)} bytes per changed value`);
  }
  const dense = r.steps.find((s) => s.dense !== undefined)!;
  assert.equal(dense.denseTensors, 1, "the tensor moved past a third is sent whole");
  assert.ok(dense.identical);

  // The head holds one base plus the patches since it (the re-base policy bounds them).
  const last = r.steps.at(-1)!;
  const patchesSinceBase = r.steps.slice(r.steps.indexOf(full) + 1).reduce((n, s) => n + s.bytes, 0);
  assert.ok(last.headObjectBytes <= full.bytes + patchesSinceBase + 1024 * 1024, `head holds ${last.headObjectBytes} bytes`);

  assert.ok(r.lateJoiner?.identical, "the late joiner is bit-identical to the publisher");
  assert.deepEqual(r.lateJoiner!.applied, ["full", "patch", "patch", "patch", "patch"], "base plus every patch since");
  assert.ok(r.lateJoiner!.bytes < full.bytes / 10, "the late joiner on a warm node read the base from the node's copy, not over a socket");
  assert.ok(r.rawZmqMiBps > 0);

  // One copy per node, the head sending the base once: the other nodes took it from a node.
  assert.deepEqual(full.nodes.map((n) => n.source).sort(), ["head", "peer", "peer"], "one node from the head, two from other nodes");
  assert.ok(full.headBytesOut < 1.1 * full.bytes, `the head sent ${full.headBytesOut} bytes for a ${full.bytes}-byte base to three nodes`);
  assert.ok(full.executorTcpBytes < full.bytes / 10, "executors read the base from their nodes' files");

  // A node that joins after the four patches: a peer holds that version, so the head sends it nothing.
  assert.ok(r.newNode?.identical, "the new node's executor is bit-identical to the publisher");
  assert.equal(r.newNode!.source, "peer");
  assert.equal(r.newNode!.headBytes, 0, `the head sent the new node ${r.newNode!.headBytes} bytes`);
  assert.ok(r.newNode!.fromPeers >= full.bytes, "its copy came from a peer");
  // The re-publication of weights every node holds: each node copied it ahead of the commit and installed that copy.
  const again = byName(REPUBLICATION.name);
  assert.equal(again.kind, "full");
  assert.deepEqual(again.nodes.map((n) => n.source), ["precopy", "precopy", "precopy"], "every node installed the parts it copied while the upload ran");
  assert.ok(again.headBytesOut < 1.1 * again.bytes, `the head sent ${again.headBytesOut} bytes for a ${again.bytes}-byte re-base`);
  // The fresh-page bound is measured on every medium a full publication writes.
  assert.ok(r.freshPages.writes.length >= 2 && r.freshPages.writes.every((w) => w.rawMiBps > 0), JSON.stringify(r.freshPages));
  // The CPU floor the report prints: every role's CPU-seconds are this step's own (a count taken
  // since the process started would pass the cores' capacity over the step's wall time).
  for (const f of r.steps.filter((s) => s.full)) {
    const work = Object.values(f.cpuS).reduce((a, b) => a + b, 0);
    const capacity = (r.cores * f.slowestMs) / 1000 + 0.01 * 12; // + a clock tick per process
    assert.ok(work > 0 && work <= capacity, `${f.name}: ${work.toFixed(2)} CPU-s in ${f.slowestMs.toFixed(0)} ms on ${r.cores} cores`);
  }
  // The simulated distribution: a tree of depth about log2(100) against a chain of 100.
  const [tree, chain] = r.distribution;
  assert.ok(tree!.depth <= 8 && chain!.depth === 100, `depths ${tree!.depth} and ${chain!.depth}`);
  assert.equal(tree!.headChunks, chain!.headChunks, "the head sends the object once either way");
});

test("a publication past the cache's limit fails naming the object and the limit, and loses nothing published", { timeout: 180_000 }, async () => {
  // qwen2-tiny's bf16 base is 18.7 MiB: one base and its patches fit in 26 MiB, two bases do not.
  const cluster = await startCluster({ agents: [], headArgs: ["--mem-limit", "26m"] });
  const app = await connect({ name: "weights-limit", head: cluster.endpoint });
  const engines: TensorEngine[] = [];
  try {
    for (const seed of [0, 5]) {
      const e = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
      engines.push(e);
      await e.initModel({ config: "qwen2-tiny", seed, dtype: "bfloat16", device: "cpu", threads: 1 });
    }
    const [trainer, rollout] = engines as [TensorEngine, TensorEngine];
    const publisher = new WeightPublisher(app.objects, "weights", trainer);
    const reader = app; // its reads go through the same head; writes leave what it holds alone
    {
      assert.equal((await publisher.publish()).kind, "full");
      await trainer.perturb({ share: 0.027, seed: 1 });
      assert.equal((await publisher.publish()).kind, "patch");
      // A re-base replaces the base and its patches: it fits although two bases would not.
      await trainer.perturb({ share: 0.027, seed: 2 });
      const rebase = await publisher.publish({ full: true });
      assert.equal(rebase.kind, "full");
      await applyPublications(reader.objects, "weights", rollout);
      const published = (await trainer.digest()).digest;
      assert.equal((await rollout.digest()).digest, published);

      // Every tensor moves past a third: a patch as large as the base, which does not fit beside it.
      await trainer.perturb({ share: 0.9, seed: 3 });
      const { error } = await rejection(publisher.publish());
      assert.equal(error.name, "CacheFullError", error.message);
      assert.match(error.message, /'weights'/, "the error names the object");
      assert.match(error.message, /26(\.0)? MiB/, `the error names the limit: ${error.message}`);
      // Nothing published is lost: a new driver of the app (holding nothing) with a new engine (other weights)
      // finds the head's object at the version of the last accepted publication and rebuilds it exactly.
      const again = await connect({ name: "weights-limit", head: cluster.endpoint });
      const fresh = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
      engines.push(fresh);
      try {
        await fresh.initModel({ config: "qwen2-tiny", seed: 11, dtype: "bfloat16", device: "cpu", threads: 1 });
        assert.notEqual((await fresh.digest()).digest, published, "the new engine starts from other weights");
        const synced = await applyPublications(again.objects, "weights", fresh);
        assert.equal(synced.cache?.version, rebase.cacheVersion, "the head's object is at the version of the last accepted publication");
        assert.deepEqual(synced.applied, ["full"], "the new reader rebuilt from the base the head kept");
        assert.equal((await fresh.digest()).digest, published, "and holds exactly the last accepted version");
      } finally {
        await again.disconnect(); // close() would release the app, the first driver's too
      }
      await applyPublications(reader.objects, "weights", rollout);
      assert.equal((await rollout.digest()).digest, published);

      // The next publication re-bases (the engine's copy moved past the cache's), and readers follow it.
      const next = await publisher.publish();
      assert.equal(next.kind, "full");
      assert.ok(next.rebased);
      await applyPublications(reader.objects, "weights", rollout);
      assert.equal((await rollout.digest()).digest, (await trainer.digest()).digest);
    }
  } finally {
    for (const e of engines) await e.close();
    await app.close();
    await cluster.stop();
  }
});
