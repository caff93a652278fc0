/**
 * The endpoint's shared decode against a scripted engine: concurrent
 * requests go in one batch (at once when every open session has asked, else
 * after the gather window); past capacity a request is refused with 429 and
 * Retry-After; past its deadline 504, the row delivered to nobody; a batch
 * waits while weights change; a continued row whose source the engine lost
 * is sent again whole; engine sessions are released when the last row of
 * theirs is given back. And the trainer's check of sampled ids.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { DecodeBatcher, type BatchEngine } from "../../sdk/rl/agent/batcher.js";
import { EndpointError } from "../../sdk/rl/agent/endpoint-error.js";
import { EngineError } from "../../sdk/tensor/errors.js";
import type { BatchRowSpec, BatchResult } from "../../sdk/tensor/types.js";
import { buildSlices, checkSampled, idsDigest } from "../../sdk/rl/scoring/batch.js";
import { TrajectoryError } from "../../sdk/rl/errors.js";

/** Records each batch; answers each row with its first token after `delayMs` (or a gate the test opens). */
class ScriptedBatchEngine implements BatchEngine {
  batches: BatchRowSpec[][] = [];
  released: number[] = [];
  gate?: Promise<void>;
  fail?: EngineError;
  private next = 1;
  async batch(rows: readonly BatchRowSpec[]): Promise<BatchResult> {
    this.batches.push([...rows]);
    await this.gate;
    if (this.fail && rows.some((r) => r.from)) {
      const f = this.fail;
      this.fail = undefined;
      throw f;
    }
    return { session: this.next++, rows: rows.map((r) => ({ tokens: Int32Array.of(r.tokens[0] ?? -1), logprobs: Float32Array.of(-1), finishReason: "eos" as const, stop: null, digest: "d" })) };
  }
  async release(session: number): Promise<{ released: boolean }> {
    this.released.push(session);
    return { released: true };
  }
}

/** Resolves once `cond` holds (checked after each turn of the event loop). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setImmediate(r));
}

const row = (t: number, extra: Partial<BatchRowSpec> = {}): BatchRowSpec => ({ tokens: [t], seed: t, maxNewTokens: 4, temperature: 1, topP: 1, ...extra });
const soon = (ms = 30_000): number => performance.now() + ms;

test("concurrent requests share one batch; at once when every open session has asked; a request's choices together", async () => {
  const engine = new ScriptedBatchEngine();
  let expected = 3;
  const b = new DecodeBatcher(engine, { eosIds: [], windowMs: 60_000, expected: () => expected });
  const t0 = performance.now();
  const out = await Promise.all([1, 2, 3].map((t) => b.submit({ spec: row(t), deadline: soon() })));
  assert.ok(performance.now() - t0 < 5_000, "did not wait out the 60 s window: all three expected requests were in");
  assert.equal(engine.batches.length, 1);
  assert.deepEqual(out.map((r) => [r.tokens[0], r.row, r.session]), [[1, 0, 1], [2, 1, 1], [3, 2, 1]]);
  // With fewer than expected, the window decides.
  expected = 10;
  const w = new DecodeBatcher(engine, { eosIds: [], windowMs: 30, expected: () => expected });
  await Promise.all([4, 5].map((t) => w.submit({ spec: row(t), deadline: soon() })));
  assert.equal(engine.batches.length, 2);
  assert.equal(engine.batches[1]!.length, 2);
  // Rows submitted in one turn (a request's n choices) go in one batch even with no wait.
  const now = new DecodeBatcher(engine, { eosIds: [], windowMs: 0 });
  await Promise.all([6, 7, 8].map((t) => now.submit({ spec: row(t), deadline: soon() })));
  assert.equal(engine.batches.length, 3);
  assert.equal(engine.batches[2]!.length, 3);
});

test("past capacity a request is refused with 429 and Retry-After, never queued", async () => {
  const engine = new ScriptedBatchEngine();
  let open!: () => void;
  engine.gate = new Promise((r) => (open = r));
  const b = new DecodeBatcher(engine, { eosIds: [], windowMs: 0, maxRows: 1, maxQueued: 2 });
  const running = b.submit({ spec: row(1), deadline: soon() });
  await until(() => engine.batches.length === 1);
  const queued = [b.submit({ spec: row(2), deadline: soon() }), b.submit({ spec: row(3), deadline: soon() })];
  const refused = await b.submit({ spec: row(4), deadline: soon() }).then(() => undefined, (e: unknown) => e);
  assert.ok(refused instanceof EndpointError);
  assert.equal(refused.status, 429);
  assert.equal(refused.retryAfter, 1);
  assert.equal(b.stats.refused, 1);
  open();
  assert.equal((await running).tokens[0], 1);
  assert.deepEqual((await Promise.all(queued)).map((r) => r.tokens[0]), [2, 3]);
});

test("past its deadline a request gets 504; its row holds no reference and its session is released", async () => {
  const engine = new ScriptedBatchEngine();
  let open!: () => void;
  engine.gate = new Promise((r) => (open = r));
  const b = new DecodeBatcher(engine, { eosIds: [], windowMs: 0 });
  const late = b.submit({ spec: row(1), deadline: soon(50) });
  const e = await late.then(() => undefined, (err: unknown) => err);
  assert.ok(e instanceof EndpointError && e.status === 504, String(e));
  open();
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(engine.released, [1], "nobody took the batch's only row: its session is released");
  // Two rows delivered: released once both are given back.
  engine.gate = undefined;
  const w = new DecodeBatcher(engine, { eosIds: [], windowMs: 20 });
  const [x, y] = await Promise.all([w.submit({ spec: row(2), deadline: soon() }), w.submit({ spec: row(3), deadline: soon() })]);
  assert.equal(x.session, y.session, "one batch");
  w.drop(x.session);
  assert.deepEqual(engine.released, [1]);
  w.drop(y.session);
  assert.deepEqual(engine.released, [1, x.session]);
});

test("a held batcher waits (weights are changing), then runs; a lost source is sent again whole", async () => {
  const engine = new ScriptedBatchEngine();
  const b = new DecodeBatcher(engine, { eosIds: [], windowMs: 0 });
  b.hold(true);
  const p = b.submit({ spec: row(1), deadline: soon() });
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(engine.batches.length, 0, "no batch while held (the batch would have gone after 0 ms)");
  b.hold(false);
  await p;
  engine.fail = new EngineError({ code: "no_session", message: "gone" }, { op: "batch" });
  const r = await b.submit({ spec: row(9, { from: { session: 7, row: 0, expect: 3 } }), whole: [5, 6, 7], deadline: soon() });
  assert.equal(b.stats.retried, 1);
  const retried = engine.batches.at(-1)![0]!;
  assert.equal(retried.from, undefined);
  assert.deepEqual(retried.tokens, [5, 6, 7, 9], "the session's own ids, then the appended ones");
  assert.equal(r.tokens[0], 5);
});

test("the trainer's check: ids that are not the ones sampled, or a sampled run not masked in, refuse to train", () => {
  const tokens = [5, 6, 7, 8, 9, 10];
  const mask = [0, 0, 1, 1, 0, 1];
  const sampled = [{ at: 2, n: 2, digest: idsDigest([7, 8]) }, { at: 5, n: 1, digest: idsDigest([10]) }];
  const [slice] = buildSlices([{ tokens, mask, advantage: 1, sampled, label: "q#0" }], 1);
  checkSampled(slice!);
  const tampered = { ...slice!, tokens: Int32Array.from(slice!.tokens) };
  tampered.tokens[3] = 99;
  assert.throws(() => checkSampled(tampered), (e: Error) => e instanceof TrajectoryError && /sample q#0: the ids of sampled run 0 \(2 at 2\) differ/.test(e.message));
  const unmasked = { ...slice!, mask: Uint8Array.from(slice!.mask) };
  unmasked.mask[5] = 0;
  assert.throws(() => checkSampled(unmasked), /id 5 of sampled run 1 has mask 0/);
  const extra = { ...slice!, mask: Uint8Array.from(slice!.mask) };
  extra.mask[0] = 1;
  assert.throws(() => checkSampled(extra), /4 ids have mask 1 but its engine sampled 3/);
});
