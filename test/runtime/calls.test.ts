/**
 * Calls through real head, agent and executor processes: warm state, remote
 * errors, message limits, and 1,000 queued calls each answered once.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { RemoteError, ResreqError, ServiceStartError } from "../../sdk/errors/index.js";
import { MessageTooLargeError } from "../../sdk/wire/errors.js";
import { FIXTURES, startCluster, type TestCluster } from "../helpers/cluster.js";
import type { Counter } from "../fixtures/services.js";

let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "8g" }] });
  app = await connect({ name: "calls", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("an executor keeps its state between calls and init runs once", async () => {
  const counter = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 1, max: 1 });
  assert.equal(await counter.call("add", 2), 2);
  assert.equal(await counter.call("add", 5), 7);
  const state = await counter.call("get");
  assert.equal(state.n, 7);
  assert.equal(state.initCount, 1);
  const status = await app.status();
  const svc = status.apps[0]!.services.find((s) => s.name === "Counter")!;
  assert.equal(svc.executors.length, 1);
  assert.equal(svc.executors[0]!.pid, state.pid);
});

test("a user exception comes back as RemoteError with the remote message, name and stack", async () => {
  const counter = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 1, max: 1 });
  const err = await counter.call("failDeep", "over quota").then(
    () => assert.fail("failDeep should reject"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof RemoteError, `expected RemoteError, got ${String(err)}`);
  assert.equal(err.remoteName, "QuotaExceeded");
  assert.equal(err.remoteMessage, "over quota");
  assert.match(err.remoteStack, /level1/, "the remote stack names the throwing function");
  assert.match(err.remoteStack, /services\.js/);
  assert.equal(err.origin.service, "Counter");
  assert.equal(err.origin.method, "failDeep");
  assert.match(err.message, /QuotaExceeded: over quota/);
  // The executor survives a user error.
  assert.equal(typeof (await counter.call("get")).n, "number");
});

test("calling an unknown method is a RemoteError that lists the methods", async () => {
  const counter = await app.service<any>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 1, max: 1 });
  const err = await counter.call("nope").then(
    () => assert.fail("should reject"),
    (e: unknown) => e as RemoteError,
  );
  assert.ok(err instanceof RemoteError);
  assert.match(err.message, /no method 'nope'.*add/);
});

test("arguments and results over 128 KiB are refused with a clear error", async () => {
  const counter = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1", warmup: 1, max: 1 });
  const tooBig = "y".repeat(130 * 1024);
  await assert.rejects(counter.call("echo", tooBig), (e: unknown) => {
    assert.ok(e instanceof MessageTooLargeError);
    assert.match(e.message, /130\.\d KiB, over the 128 KiB call message limit.*ObjectRef/);
    return true;
  });
  await assert.rejects(counter.call("big", 200 * 1024), (e: unknown) => {
    assert.ok(e instanceof RemoteError);
    assert.equal(e.remoteName, "MessageTooLargeError");
    assert.match(e.message, /result of Counter\.big.*object cache/);
    return true;
  });
  assert.equal(((await counter.call("echo", "z".repeat(100 * 1024))) as string).length, 100 * 1024);
});

test("1,000 queued calls are all answered, each exactly once", async () => {
  const pool = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { name: "echo-pool", resreq: "cpu=1", warmup: 2, max: 2 });
  const results = (await Promise.all(Array.from({ length: 1000 }, (_, i) => pool.call("echo", { i })))) as Array<{ i: number }>;
  assert.deepEqual(
    results.map((r) => r.i),
    Array.from({ length: 1000 }, (_, i) => i),
  );
  await new Promise((r) => setTimeout(r, 300)); // time for any stray duplicate to arrive
  assert.equal(app.duplicateReplies, 0);
  const st = await cluster.status();
  assert.equal(st.head.calls.submitted, st.head.calls.answered, "every call the head accepted was answered");
});

test("bad resreq strings are clear errors before anything starts", async () => {
  const ref = { module: FIXTURES, export: "Counter" };
  await assert.rejects(app.service(ref, { name: "b1", resreq: "cpus=2" }), (e: unknown) => e instanceof ResreqError && /unknown resource 'cpus'.*known keys are cpu, mem, gpu/.test(e.message));
  await assert.rejects(app.service(ref, { name: "b2", resreq: "mem=12q" }), (e: unknown) => e instanceof ResreqError && /bad memory size '12q'/.test(e.message));
  await assert.rejects(app.service(ref, { name: "b3", resreq: "cpu=64" }), (e: unknown) => e instanceof ResreqError && /can never be satisfied.*n1/.test(e.message));
  await assert.rejects(app.service(ref, { name: "b4", resreq: "gpu=1" }), (e: unknown) => e instanceof ResreqError && /can never be satisfied/.test(e.message));
  await assert.rejects(
    app.service(ref, { name: "b5", resreq: "cpu=2", warmup: 3, autoscale: false }),
    (e: unknown) => e instanceof ResreqError && /gang 'b5' of 3 × "cpu=2" can never run at once/.test(e.message),
  );
  const st = await app.status();
  assert.ok(!st.apps[0]!.services.some((s) => s.name.startsWith("b")), "no refused service was created");
});

test("a service whose init throws fails with ServiceStartError carrying the remote error", async () => {
  await assert.rejects(app.service({ module: FIXTURES, export: "BrokenInit" }, { warmup: 1 }), (e: unknown) => {
    assert.ok(e instanceof ServiceStartError, String(e));
    assert.match(e.message, /BrokenInit.*RangeError: model file weights\.bin is missing/);
    return true;
  });
  await assert.rejects(app.service({ module: FIXTURES, export: "NoSuchClass" }, { warmup: 1 }), /no exported class 'NoSuchClass'/);
});
