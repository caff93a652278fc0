// Black-box tests of the real Python tensor engine through TensorEngine (tiny model, CPU).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TensorEngine, EngineError } from "../../sdk/tensor/index.js";

const TINY = {
  config: "tiny-test",
  seed: 1,
  threads: 1,
};
const VOCAB = Array.from({ length: 256 }, (_, i) => Buffer.from(`<${i}>`));
const PROMPTS = [[5, 9, 11], [7, 3, 2, 8, 200, 31]];

function padded(rows: number[][]): { tokens: Int32Array; cols: number } {
  const cols = Math.max(...rows.map((r) => r.length));
  const tokens = new Int32Array(rows.length * cols);
  rows.forEach((r, i) => tokens.set(r, i * cols));
  return { tokens, cols };
}

async function expectEngineError(p: Promise<unknown>, code: string): Promise<EngineError> {
  const err = await p.then(
    () => assert.fail(`expected EngineError ${code}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof EngineError, String(err));
  assert.equal(err.code, code, err.message);
  return err;
}

test("generate: logprobs agree with a training forward, stop strings straddle tokens, resume reuses the cache", { timeout: 60_000 }, async () => {
  const engine = await TensorEngine.start();
  try {
    const info = await engine.initModel(TINY);
    assert.equal(info.device, "cpu");
    assert.equal((await engine.setVocab(VOCAB)).size, 256);
    const free = await engine.generate(PROMPTS, { maxNewTokens: 8, temperature: 1, topP: 0.95, seed: 3 });
    const full = PROMPTS.map((p, i) => [...p, ...free.rows[i].tokens]);
    const { tokens, cols } = padded(full);
    const lp = await engine.logprobs(tokens, full.length, cols);
    free.rows.forEach((row, i) => {
      row.logprobs.forEach((v, t) => assert.ok(Math.abs(v - lp[i * cols + PROMPTS[i].length + t]) < 1e-4));
    });

    const greedy = await engine.generate(PROMPTS, { maxNewTokens: 8, temperature: 0 });
    const g = [...greedy.rows[0].tokens];
    const stop = `${g[2]}><${String(g[3]).slice(0, 1)}`; // spans the end of token 2 and the start of token 3
    const stopped = await engine.generate(PROMPTS, { maxNewTokens: 8, temperature: 0, stop: [stop] });
    assert.equal(stopped.rows[0].finishReason, "stop");
    assert.equal(stopped.rows[0].stop, stop);
    assert.ok(stopped.rows[0].tokens.length <= 4);

    const cont = await engine.resume(stopped.session, new Map([[0, [40, 41]]]), { maxNewTokens: 4, temperature: 0 });
    assert.equal(cont[1].finishReason, "idle");
    const prefix = [...PROMPTS[0], ...stopped.rows[0].tokens, 40, 41];
    const fresh = await engine.generate([prefix], { maxNewTokens: 4, temperature: 0 }, { keep: false });
    assert.deepEqual([...cont[0].tokens], [...fresh.rows[0].tokens]);
    cont[0].logprobs.forEach((v, i) => assert.ok(Math.abs(v - fresh.rows[0].logprobs[i]) < 1e-5));
    assert.deepEqual(await engine.release(stopped.session), { released: true });
  } finally {
    await engine.close();
  }
});

test("train, publish, apply: a rollout engine follows the trainer's bf16 weights exactly", { timeout: 60_000 }, async () => {
  const [trainer, rollout] = await Promise.all([TensorEngine.start(), TensorEngine.start()]);
  try {
    await trainer.initModel(TINY);
    await rollout.initModel({ ...TINY, seed: 42, dtype: "bfloat16" });
    await trainer.trainInit({ lr: 1e-5, klCoef: 0.05, microBatchSize: 2 });
    const full = await trainer.publish(64 * 1024);
    assert.equal(full.kind, "full");
    assert.ok(full.blobs.length > 1);
    assert.equal((await rollout.apply(full.blobs)).version, 1);

    const rows = 2, cols = 10;
    const tokens = Int32Array.from({ length: rows * cols }, (_, i) => (i * 37) % 256);
    const mask = Uint8Array.from({ length: rows * cols }, (_, i) => (i % cols >= 4 ? 1 : 0));
    const metrics = await trainer.trainStep({
      rows, cols, tokens, mask, advantages: Float32Array.from([1, -1]), oldLogprobs: new Float32Array(rows * cols).fill(-5.5),
    });
    assert.equal(metrics.tokens, 12);
    assert.ok(Number.isFinite(metrics.loss) && Number.isFinite(metrics.grad_norm));

    const patch = await trainer.publish();
    assert.equal(patch.kind, "patch");
    assert.equal(patch.version, 2);
    assert.ok(patch.bytes < full.bytes, `${patch.bytes} < ${full.bytes}`);
    const applied = await rollout.apply(patch.blobs);
    assert.equal(applied.version, 2);
    await expectEngineError(rollout.apply(patch.blobs), "bad_patch"); // base version 1 is gone

    // Exactness: the patched rollout's weights, saved, are byte-identical to the trainer's bf16 export.
    const [dirA, dirB] = await Promise.all([mkdtemp(join(tmpdir(), "hearth-engine-")), mkdtemp(join(tmpdir(), "hearth-engine-"))]);
    await Promise.all([trainer.saveCheckpoint(dirA), rollout.saveCheckpoint(dirB)]);
    const [a, b] = await Promise.all([readFile(join(dirA, "model.safetensors")), readFile(join(dirB, "model.safetensors"))]);
    assert.ok(a.equals(b), "published bf16 bytes differ from the trainer's");
    await Promise.all([rm(dirA, { recursive: true }), rm(dirB, { recursive: true })]);
  } finally {
    await Promise.all([trainer.close(), rollout.close()]);
  }
});

test("Python exceptions surface as EngineError with code and traceback", { timeout: 30_000 }, async () => {
  const engine = await TensorEngine.start();
  try {
    const noModel = await expectEngineError(engine.generate([[1]]), "no_model");
    assert.match(noModel.traceback ?? "", /Traceback/);
    assert.equal(noModel.op, "generate");
    const bad = await expectEngineError(engine.initModel({ checkpoint: "/nonexistent/model" }), "bad_config");
    assert.match(bad.message, /nonexistent/);
    await expectEngineError(engine.request("no_such_op"), "unknown_op");
    assert.equal((await engine.ping()).pid, engine.pid); // still serving after errors
  } finally {
    await engine.close();
  }
});

test("engine death rejects pending and later requests; close is idempotent", { timeout: 30_000 }, async () => {
  const engine = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  await engine.initModel(TINY);
  const pending = engine.generate(PROMPTS, { maxNewTokens: 4000, temperature: 0 });
  process.kill(engine.pid ?? 0, "SIGKILL");
  const err = await expectEngineError(pending, "engine_exited");
  assert.match(err.message, /SIGKILL/);
  await expectEngineError(engine.ping(), "engine_exited");
  assert.equal(engine.alive, false);
  await engine.close();
  await engine.close();

  const other = await TensorEngine.start();
  await Promise.all([other.close(), other.close()]);
  await expectEngineError(other.ping(), "closed");
});
