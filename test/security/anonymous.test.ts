/**
 * An anonymous or forged peer on 127.0.0.1, against a real head, agent and
 * executors. With no credential at all it is closed in the ZeroMQ handshake
 * (the connection gate) and receives nothing. Past the gate (holding an
 * unrelated app's token, peers.ts) and claiming what it cannot prove, it
 * gets a challenge and a refusal, nothing else, and changes nothing. Each
 * message it sends reaches the head (the challenge says so) before the
 * refusal, so "no reply" is checked after the head handled it.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { DIST, startCluster, type TestCluster } from "../helpers/cluster.js";
import { attack, msg, refusedAtGate, req, REFUSED } from "./peers.js";
import type { Vault } from "./services.js";

const VAULT = { module: path.join(DIST, "test/security/services.js"), export: "Vault" };
let cluster: TestCluster;
let victim: App;
let pool: PoolHandle<Vault>;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "a1", cpus: 4, mem: "2g" }] });
  victim = await connect({ name: "victim", head: cluster.endpoint });
  pool = await victim.service<Vault>(VAULT, { name: "vault", warmup: 1 });
  await victim.objects.put({ plans: "the secret plans" }, { key: "plans" });
});

after(async () => {
  await victim?.close().catch(() => undefined);
  await cluster?.stop();
});

/** Only the handshake came back: a challenge, then the refusal of the forged answer. */
function assertNothingLeaked(out: { handshake: any[]; replies: any[] }): void {
  assert.deepEqual(out.replies, [], "the head answered an unauthenticated peer");
  assert.deepEqual(out.handshake.map((m) => m.t), REFUSED);
  assert.equal(out.handshake[1].error.name, "AuthError");
}

test("a peer with no credential at all is closed in the handshake and receives nothing", async () => {
  const out = await refusedAtGate(cluster.endpoint, [req("status", { all: true }, 1), req("hello", { app: "victim" }, 2), req("shutdown", {}, 3)]);
  assert.match(out.refused, /handshake:error/);
  assert.deepEqual(out.received, []);
  assert.equal(cluster.head.exitCode, null);
});

test("an anonymous peer reads no status: not all apps', not one app's", async () => {
  assertNothingLeaked(await attack(cluster.endpoint, [req("status", { all: true }, 1), req("status", { app: "victim" }, 2)]));
});

test("an anonymous peer reads no app's objects", async () => {
  assertNothingLeaked(await attack(cluster.endpoint, [req("hello", { app: "victim" }, 1), req("obj-get", { key: "plans" }, 2), req("obj-stat", { key: "plans" }, 3)]));
});

test("an anonymous peer cannot join an app and call its services", async () => {
  const before = await pool.call("ping");
  assertNothingLeaked(await attack(cluster.endpoint, [req("hello", { app: "victim" }, 1), msg({ t: "call", cid: 1, svc: pool.info.id, method: "ping" }, [])]));
  const status = await cluster.status();
  const app = status.apps.find((a: any) => a.name === "victim");
  assert.equal(app.drivers, 1, "only the victim's own driver is attached");
  assert.deepEqual(await pool.call("ping"), before, "the service still answers its own driver");
});

test("an anonymous peer cannot declare a service whose module is a data: URL", async () => {
  const markerDir = mkdtempSync(path.join(os.tmpdir(), "hearth-sec-"));
  // Writable by any user: an executor run as its app's own user (root agents) could write the marker if it ran.
  chmodSync(markerDir, 0o777);
  const marker = path.join(markerDir, "ran");
  const module = `data:text/javascript,import{writeFileSync}from"node:fs";writeFileSync(${JSON.stringify(marker)},"ran");export class Evil{}`;
  const spec = { name: "evil", module, export: "Evil", resreq: "cpu=1" };
  assertNothingLeaked(await attack(cluster.endpoint, [req("hello", { app: "evil-app" }, 1), req("service", { spec }, 2)]));
  // Also into an existing app, through a routing id that looks like the victim's executor's.
  assertNothingLeaked(await attack(cluster.endpoint, [req("hello", { app: "victim" }, 1), req("service", { spec }, 2)], { routingId: "x.000001" }));
  const status = await cluster.status();
  assert.equal(status.apps.some((a: any) => a.name === "evil-app"), false);
  assert.deepEqual(status.apps.find((a: any) => a.name === "victim").services.map((s: any) => s.name), ["vault"]);
  assert.equal(existsSync(marker), false);
});

test("an anonymous peer cannot shut the head down; nor can an app's own driver", async () => {
  assertNothingLeaked(await attack(cluster.endpoint, [req("shutdown")]));
  const driver = (await HeadClient.open(cluster.endpoint, { app: "victim" })).client;
  try {
    await assert.rejects(driver.control("shutdown", {}), (e: Error) => e.name === "AuthError" && /admin credential/.test(e.message));
    await assert.rejects(driver.control("status", { all: true }), (e: Error) => e.name === "AuthError");
  } finally {
    driver.close();
  }
  assert.equal(cluster.head.exitCode, null);
  assert.ok((await cluster.status()).agents.length > 0, "the head still answers");
});

test("a peer without the secret cannot register as an agent and be given work", async () => {
  const register = msg({ t: "register", host: "127.0.0.1", pid: 4242, cpu: 64, mem: 64 * 2 ** 30, gpus: [], labels: {}, executors: [] });
  assertNothingLeaked(await attack(cluster.endpoint, [register, msg({ t: "hb" })], { routingId: "a.fake", claim: { role: "agent", id: "fake", app: "" } }));
  // The agent role claimed at the handshake, with the routing id of the real agent's old scheme.
  assertNothingLeaked(await attack(cluster.endpoint, [register], { routingId: "a.a1", claim: { role: "agent", id: "a1", app: "" } }));
  const status = await cluster.status();
  assert.deepEqual(status.agents.map((a: any) => a.id), ["a1"]);
});
