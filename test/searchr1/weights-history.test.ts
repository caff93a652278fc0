/**
 * Bounded weight history: 50 publications from a real trainer engine through
 * a real head's object cache. The published object gets a fresh base after
 * N patches (or when the patches outweigh a share of the base), so a rollout
 * that joins after the 50th fetches one base and at most N patches, applies
 * at most N + 1 blobs, and ends bit-identical to the trainer; one that
 * followed all along stays exact through every re-base.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { DEFAULT_REBASE, WeightPublisher, applyPublications } from "../../sdk/rl/services/weights.js";
import { TensorEngine } from "../../sdk/tensor/index.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

let cluster: TestCluster;
before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 1, mem: "2g" }] });
});
after(async () => {
  await cluster?.stop();
});

/** A random batch of 4 rows × 16 tokens, all but the first 4 trained. */
function batch(seed: number) {
  const rows = 4;
  const cols = 16;
  const tokens = Int32Array.from({ length: rows * cols }, (_, i) => (i * 31 + seed * 17) % 256);
  const mask = Uint8Array.from({ length: rows * cols }, (_, i) => (i % cols >= 4 ? 1 : 0));
  return { rows, cols, tokens, mask, advantages: Float32Array.from([1, -1, 0.5, -0.5]), oldLogprobs: new Float32Array(rows * cols).fill(-5.5) };
}

test("50 publications: re-based every 8 patches; a late rollout fetches one base and at most 8 patches and ends exact", async () => {
  const app = await connect({ name: "weights-history", head: cluster.endpoint });
  const late = await connect({ name: "weights-history", head: cluster.endpoint });
  const trainer = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  const follower = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  const joiner = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  try {
    await trainer.initModel({ config: "tiny-test", seed: 1, dtype: "float32", threads: 1 });
    await trainer.trainInit({ lr: 1e-2 });
    for (const e of [follower, joiner]) await e.initModel({ config: "tiny-test", seed: 99, dtype: "float32", threads: 1 });
    const policy = { maxPatches: 8, maxPatchShare: DEFAULT_REBASE.maxPatchShare };
    const publisher = new WeightPublisher(app.objects, "wh/weights", trainer, policy);
    const kinds: string[] = [];
    let baseBytes = 0;
    let maxPatch = 0;
    for (let i = 0; i < 50; i++) {
      if (i > 0) await trainer.trainStep(batch(i));
      const p = await publisher.publish();
      kinds.push(p.kind);
      if (p.kind === "full") baseBytes = Math.max(baseBytes, p.bytes);
      else maxPatch = Math.max(maxPatch, p.bytes);
      // A rollout that follows every publication stays exact across re-bases.
      if (i % 7 === 0 || p.rebased) {
        await applyPublications(app.objects, "wh/weights", follower);
        assert.equal((await follower.digest()).digest, (await trainer.digest()).digest, `follower exact after publication ${i + 1}`);
      }
    }
    const fulls = kinds.map((k, i) => (k === "full" ? i : -1)).filter((i) => i >= 0);
    assert.ok(fulls.length >= 5, `re-based several times (full publications at ${fulls.join(", ")})`);
    for (let i = 1; i < fulls.length; i++) assert.ok(fulls[i]! - fulls[i - 1]! <= policy.maxPatches + 1, "never more than 8 patches on one base");

    let applied = 0;
    let requests = 0;
    const applySources = joiner.applySources.bind(joiner);
    joiner.applySources = (sources, options) => ((applied += sources.length), (requests += 1), applySources(sources, options));
    const before = late.objects.stats.bytesReceived;
    const synced = await applyPublications(late.objects, "wh/weights", joiner);
    const fetched = late.objects.stats.bytesReceived - before;
    const patchesSinceBase = kinds.length - 1 - fulls.at(-1)!;
    assert.equal(applied, 1 + patchesSinceBase, `a late joiner applies one base + the ${patchesSinceBase} patches after it`);
    assert.ok(applied <= 1 + policy.maxPatches, `a late joiner applied ${applied} blobs (one base + ${patchesSinceBase} patches)`);
    assert.deepEqual(synced.applied, ["full", ...Array<string>(patchesSinceBase).fill("patch")]);
    // All in place at once (this client downloads them): one engine request, applied a tensor at a time.
    assert.equal(requests, 1, "the base and its patches went to the engine in one request");
    assert.ok(fetched <= baseBytes + policy.maxPatches * maxPatch + 64 * 1024, `a late joiner fetched ${fetched} bytes, not the whole history`);
    assert.equal((await joiner.digest()).digest, (await trainer.digest()).digest, "the late joiner holds the trainer's weights exactly");
  } finally {
    await Promise.all([trainer.close(), follower.close(), joiner.close()]);
    await late.close();
    await app.close().catch(() => undefined);
  }
});
