/**
 * Domain errors raised by a real head reach the driver as the same class,
 * with the ids the head filled and the cause it attached: an object write
 * whose ifVersion fails, a get of a missing key, a resreq no agent can hold,
 * a service that does not exist, and a service whose init threw.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { ObjectNotFoundError, RemoteError, ResreqError, ServiceNotFoundError, ServiceStartError, VersionConflictError } from "../../sdk/errors/index.js";
import { FIXTURES, rejection, startCluster, type TestCluster } from "../helpers/cluster.js";

const APP = "domain-errors";
let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "4g" }] });
  app = await connect({ name: APP, head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("a write whose ifVersion fails is a VersionConflictError naming key, app, expected and actual", async () => {
  const ref = await app.objects.put({ n: 1 }, { key: "cas/x" });
  await app.objects.update(ref, { n: 2 }, { ifVersion: 1 });
  const { error } = await rejection(app.objects.update(ref, { n: 3 }, { ifVersion: 1 }));
  assert.ok(error instanceof VersionConflictError, String(error));
  assert.equal(error.name, "VersionConflictError");
  assert.deepEqual([error.key, error.app, error.expected, error.actual], ["cas/x", APP, 1, 2]);
  assert.match(error.message, /expected version 1 but it is at 2/);
  const twice = await rejection(app.objects.put({ n: 9 }, { key: "cas/x" }));
  assert.ok(twice.error instanceof VersionConflictError, String(twice.error));
  assert.deepEqual([twice.error.key, twice.error.expected, twice.error.actual], ["cas/x", 0, 2], "a put of an existing key expected it absent");
});

test("a get of a key that does not exist is an ObjectNotFoundError naming key and app", async () => {
  const { error } = await rejection(app.objects.get("no/such/key"));
  assert.ok(error instanceof ObjectNotFoundError, String(error));
  assert.deepEqual([error.key, error.app], ["no/such/key", APP]);
});

test("a resreq no agent can hold is refused by the head with a ResreqError naming the resreq and the service", async () => {
  const { error } = await rejection(app.service({ module: FIXTURES, export: "Counter" }, { name: "too-big", resreq: "cpu=2,mem=64g" }));
  assert.ok(error instanceof ResreqError, String(error));
  assert.match(error.message, /can never be satisfied.*n1/, "the head's check, not the SDK's parser");
  assert.equal(error.service, "too-big");
  assert.equal(error.resreq, "cpu=2,mem=64g");
});

test("stopping a service the app does not have is a ServiceNotFoundError naming service and app", async () => {
  const { error } = await rejection(app.stopService("nope"));
  assert.ok(error instanceof ServiceNotFoundError, String(error));
  assert.deepEqual([error.service, error.app], ["nope", APP]);
});

test("a service whose init throws is a ServiceStartError naming service and executor, caused by the RemoteError", async () => {
  const { error } = await rejection(app.service({ module: FIXTURES, export: "BrokenInit" }, { name: "broken", warmup: 1 }));
  assert.ok(error instanceof ServiceStartError, String(error));
  assert.equal(error.service, "broken");
  assert.match(error.executorId ?? "", /^x\d+$/);
  const cause = error.cause;
  assert.ok(cause instanceof RemoteError, `cause: ${String(cause)}`);
  assert.equal(cause.remoteName, "RangeError");
  assert.equal(cause.remoteMessage, "model file weights.bin is missing");
  assert.equal(cause.origin.executorId, error.executorId);
  assert.match(cause.remoteStack, /init/);
});
