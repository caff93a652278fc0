/**
 * Every field of a service declaration is bounded, on a real head: a value
 * out of range (idleTimeout 1e15 ms, a 70 000-character module path, a
 * negative deadline…) is refused with a ServiceConfigError that names the
 * field, repeats the value and states the range, through the SDK and
 * through a raw client that skips the SDK's own checks. Nothing is declared.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { ServiceConfigError } from "../../sdk/errors/index.js";
import type { App } from "../../sdk/runtime/app.js";
import { LIVENESS, rejection, startCluster, type TestCluster } from "../helpers/cluster.js";
import { RawClient } from "../helpers/raw-client.js";

let cluster: TestCluster;
let app: App;
let raw: RawClient;

before(async () => {
  // An agent, so that a declaration the head wrongly accepted would be declared, not refused for want of one.
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 1, mem: "1g" }] });
  app = await connect({ name: "spec-bounds", head: cluster.endpoint });
  raw = new RawClient(cluster.endpoint);
  await raw.request("hello", { app: "spec-bounds-raw" });
});

after(async () => {
  await raw?.close();
  await app?.close();
  await cluster?.stop();
});

const BASE = { name: "s", module: LIVENESS, export: "Sleeper", autoscale: true, warmup: 0 };

test("idleTimeout 1e15 ms is refused through the SDK, naming the field, the value and the range", async () => {
  const { error } = await rejection(app.service({ module: LIVENESS, export: "Sleeper" }, { name: "idle", warmup: 0, idleTimeout: 1e15, wait: false }));
  assert.ok(error instanceof ServiceConfigError, `${error.name}: ${error.message}`);
  assert.equal(error.service, "idle");
  assert.equal(error.field, "idleTimeout");
  assert.match(error.message, /service 'idle': idleTimeout must be a non-negative number of milliseconds, at most 604800000 \(7 days\); got 1000000000000000/);
});

test("every spec field out of bounds is refused by the head itself, naming field, value and range", async () => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ idleTimeoutMs: 1e15 }, /idleTimeout must be a non-negative number of milliseconds, at most 604800000 \(7 days\); got 1000000000000000/],
    [{ idleTimeoutMs: -1 }, /idleTimeout must be a non-negative .*; got -1/],
    [{ callTimeoutMs: 0 }, /callTimeoutMs must be a positive number of milliseconds, at most 604800000 \(7 days\); got 0/],
    [{ initTimeoutMs: 1e300 }, /initTimeoutMs must be a positive number .*; got 1e\+300/],
    [{ warmup: 1e9 }, /warmup must be a whole number from 0 to 1024; got 1000000000/],
    [{ max: 2.5 }, /max must be a whole number from 1 to 4096; got 2\.5/],
    [{ concurrency: 0 }, /concurrency must be a whole number from 1 to 1024; got 0/],
    [{ maxQueued: 1e7 }, /maxQueued must be a whole number from 1 to 1000000; got 10000000/],
    [{ module: "m".repeat(70_000) }, /module must be a module path or URL of 1 to 65536 characters without NUL; got "mmm.*… \(70002 characters\)/],
    [{ module: "" }, /module must be a module path or URL of 1 to 65536 characters.*; got ""/],
    [{ export: "Not an identifier!" }, /export must be the name of the exported class: a JavaScript identifier of 1 to 256 characters; got "Not an identifier!"/],
    [{ resreq: "cpu=1,".repeat(300) }, /resreq must be a string like "cpu=8,mem=64g,gpu=1" of at most 1024 characters; got "cpu=1,/],
    [{ project: { hash: "zz", key: "anything" } }, /project must be \{ hash, key \} of a packed project.*; got \{"hash":"zz","key":"anything"\}/],
    [{ autoscale: "yes" }, /autoscale must be true or false; got "yes"/],
    [{ elastic: 1 }, /elastic must be true or false; got 1/],
  ];
  for (const [fields, pattern] of cases) {
    const field = Object.keys(fields)[0]!;
    const { error } = await rejection(raw.request("service", { spec: { ...BASE, ...fields } }));
    assert.match(error.message, /^ServiceConfigError: service 's': /, `${field}: ${error.message}`);
    assert.match(error.message, pattern, field);
  }
  const status = await cluster.status();
  assert.deepEqual(status.apps.find((a: any) => a.name === "spec-bounds-raw").services, [], "nothing was declared");
});

test("values at the bounds are accepted", async () => {
  const spec = { ...BASE, name: "edge", idleTimeoutMs: 604_800_000, callTimeoutMs: 1, initTimeoutMs: 604_800_000, maxQueued: 1_000_000, concurrency: 1024, max: 4096 };
  const info = await raw.request("service", { spec });
  assert.equal(info.name, "edge");
  await raw.request("stop-service", { service: "edge" });
});
