/**
 * Bounds, each with a clear error, on a real head: a service's queue limit
 * (backpressure), resreq minimums and maximums, maxima for warmup, max and
 * concurrency, and keep-alive and app count capped by the head's
 * configuration rather than the client's, and log lines cut to a bounded
 * length.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { QueueFullError, ResreqError, ServiceConfigError } from "../../sdk/errors/index.js";
import { pack } from "msgpackr";
import { LIVENESS, rejection, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { RawClient } from "../helpers/raw-client.js";
import type { Sleeper } from "../helpers/liveness-services.js";

let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "4g" }], headArgs: ["--max-keep-alive", "2m", "--max-apps", "3"] });
  app = await connect({ name: "bounds", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("calls beyond a service's maxQueued fail at once with QueueFullError; the queued ones still run", async () => {
  const pool = await app.service<Sleeper>({ module: LIVENESS, export: "Sleeper" }, { name: "q", warmup: 1, max: 1, maxQueued: 2 });
  const running = pool.call("sleep", 500);
  const queued = [pool.call("sleep", 0), pool.call("sleep", 0)];
  const { error } = await rejection(pool.call("sleep", 0));
  assert.ok(error instanceof QueueFullError, String(error));
  assert.deepEqual([error.service, error.limit], ["q", 2]);
  assert.match(error.message, /service 'q' already has 2 calls queued \(its maxQueued\).*pool\.map/);
  await Promise.all([running, ...queued]);
  assert.equal((await pool.call("whoami")).calls, 3, "the accepted calls ran, the refused one did not");
  await pool.stop();
});

test("cpu=0 and over-large requests are refused by the SDK and by the head", async () => {
  const ref = { module: LIVENESS, export: "Sleeper" };
  await assert.rejects(app.service(ref, { name: "z", resreq: "cpu=0" }), (e: unknown) => e instanceof ResreqError && /cpu must be at least 0\.01.*cpu=0 would let executors pile up/.test(e.message));
  await assert.rejects(app.service(ref, { name: "z", resreq: "gpu=65" }), (e: unknown) => e instanceof ResreqError && /gpu .* over the per-executor maximum \(64\)/.test(e.message));
  await assert.rejects(app.service(ref, { name: "z", warmup: 5000 }), (e: unknown) => e instanceof ServiceConfigError && /warmup must be a whole number from 0 to 1024; got 5000/.test(e.message));
  await assert.rejects(app.service(ref, { name: "z", max: 10_000 }), (e: unknown) => e instanceof ServiceConfigError && /max must be a whole number from 1 to 4096/.test(e.message));
  await assert.rejects(app.service(ref, { name: "z", concurrency: 0 }), (e: unknown) => e instanceof ServiceConfigError && /concurrency must be a whole number from 1 to 1024; got 0/.test(e.message));
  // The head checks again: a raw client skips the SDK.
  const raw = new RawClient(cluster.endpoint);
  try {
    await raw.request("hello", { app: "bounds-raw" });
    await assert.rejects(raw.request("service", { spec: { name: "z", module: LIVENESS, export: "Sleeper", resreq: "cpu=0" } }), /ResreqError: cpu must be at least 0\.01/);
    await raw.request("close-app");
  } finally {
    await raw.close();
  }
});

test("keep-alive and the number of apps are capped by the head's configuration", async () => {
  const raws: RawClient[] = [];
  try {
    const a = new RawClient(cluster.endpoint);
    raws.push(a);
    const hello = await a.request("hello", { app: "long-lived", keepAliveMs: 365 * 24 * 3_600_000 });
    assert.equal(hello.keepAliveMs, 120_000, "capped at --max-keep-alive 2m");
    // Apps now: _test-observer, bounds, long-lived = 3 = --max-apps.
    const b = new RawClient(cluster.endpoint);
    raws.push(b);
    await assert.rejects(b.request("hello", { app: "one-too-many" }), /ProtocolError: the head holds its maximum of 3 apps/);
    await a.request("close-app");
    await b.request("hello", { app: "one-too-many" });
    await b.request("close-app");
  } finally {
    for (const r of raws) await r.close();
  }
});

test("a log line built from a peer's input is truncated", async () => {
  const raw = new RawClient(cluster.endpoint);
  try {
    const huge = "T".repeat(50_000);
    await raw.sendFrames([pack({ t: huge, rid: 7 })]);
    const reply = await raw.waitFor((m) => m.header.rid === 7);
    assert.equal(reply.header.ok, false);
    await waitFor("the rejection in the head's log", () => (/rejected message from .*… \[\d+ more characters\]/.test(cluster.headLog()) ? true : undefined), 5000);
    assert.ok(!cluster.headLog().includes(huge), "the 50 000-character type never reaches the log whole");
  } finally {
    await raw.close();
  }
});
