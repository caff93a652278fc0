/**
 * Identities bound to credentials, on a real head, agent and executors: a
 * routing id is worth nothing without the credential proven on it, an agent
 * reports only its own executors, an executor holds its own credential (not
 * the secret), the agent's cache serves only its executors, and a driver of
 * one app reaches nothing of another.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { Dealer } from "zeromq";
import { pack } from "msgpackr";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import type { GangHandle, PoolHandle } from "../../sdk/runtime/handles.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { credentialFrom, deriveKey, loadSecret, secretFile } from "../../sdk/wire/auth.js";
import { DIST, executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { RawClient, rawCredential, rawGate } from "../helpers/raw-client.js";
import { attack, msg, outsider, refusedAtGate, req, REFUSED } from "./peers.js";
import type { Vault } from "./services.js";

const VAULT = { module: path.join(DIST, "test/security/services.js"), export: "Vault" };
let cluster: TestCluster;
let victim: App;
let pool: PoolHandle<Vault>;
let gang: GangHandle<Vault>;

before(async () => {
  // The head and agent are told where the secret is, so the test can check that no executor is.
  process.env.HEARTH_SECRET_FILE = secretFile();
  cluster = await startCluster({ agents: [{ id: "a1", cpus: 4, mem: "2g" }] });
  victim = await connect({ name: "victim", head: cluster.endpoint });
  pool = await victim.service<Vault>(VAULT, { name: "vault", warmup: 1 });
  gang = await victim.service<Vault>(VAULT, { name: "crew", warmup: 2, autoscale: false });
  await victim.objects.put({ plans: "the secret plans" }, { key: "plans" });
});

after(async () => {
  await victim?.close().catch(() => undefined);
  await cluster?.stop();
});

test("a peer presenting a live executor's routing id takes none of its calls", async () => {
  const me = await pool.call("identity");
  assert.match(me.routingId!, /^x\.\S+\.[0-9a-f]{24}$/, "executors connect with a random routing id");
  const { pid } = await pool.call("ping");
  // It passes the connection gate with an unrelated app's token, and presents the executor's routing id.
  const thief = new Dealer({ routingId: me.routingId!, linger: 0, ...rawGate(outsider()) });
  try {
    const handshook = new Promise<void>((resolve) => thief.events.on("handshake", () => resolve()));
    thief.connect(cluster.endpoint);
    await Promise.race([handshook, new Promise((_, rej) => setTimeout(() => rej(new Error("the thief's connection never completed a handshake")), 5000))]);
    await pool.withOptions({ timeoutMs: 5000 }).call("ping"); // a round trip through the head after the thief's connection was attached
    const answers = await Promise.all(Array.from({ length: 20 }, () => pool.withOptions({ timeoutMs: 5000 }).call("ping")));
    assert.ok(answers.every((a) => a.pid === pid), "every call was answered by the real executor");
    thief.receiveTimeout = 0;
    await assert.rejects(thief.receive(), "the thief's socket received nothing");
  } finally {
    thief.close();
  }
  // The old, predictable routing id with an executor's claimed identity is nobody either.
  const out = await attack(cluster.endpoint, [msg({ t: "ready", pid: 1 }), msg({ t: "result", hid: 1 }, "forged")], {
    routingId: `x.${me.executorId}`,
    claim: { role: "executor", id: me.executorId, app: "victim" },
  });
  assert.deepEqual(out.replies, []);
  assert.deepEqual(out.handshake.map((m) => m.t), REFUSED);
});

test("an executor holds its own credential, never the cluster secret", async () => {
  const secret = loadSecret(secretFile());
  const ids = await pool.call("identity");
  assert.equal(ids.secretFile, null, "the agent keeps HEARTH_SECRET_FILE from its executors");
  assert.match(ids.token!, /^[0-9a-f]{64}$/);
  assert.notEqual(ids.token, secret.toString("hex"));
  assert.equal(ids.token, deriveKey(secret, "executor", ids.executorId, "victim").toString("hex"), "the key of this executor of this app");
  const other = await gang.callRank(0, "identity");
  assert.notEqual(other.token, ids.token, "each executor has its own");
});

test("the agent's cache socket serves no object without an executor's credential", async () => {
  const me = await pool.call("identity");
  assert.deepEqual(await pool.call("read", "plans"), { plans: "the secret plans" }, "the executor itself reads through the cache");
  const secret = loadSecret(secretFile());
  const reads = [req("obj-get", { key: "plans" }, 1), req("obj-stat", { key: "plans" }, 2)];
  // No credential, or one the cache's gate does not take (a driver's; another app's executor id): closed in the handshake.
  for (const gate of [undefined, outsider(), rawCredential("executor", me.executorId!, "other")]) {
    const out = await refusedAtGate(me.cache!, reads, { gate });
    assert.deepEqual(out.received, [], `the cache sent something to a peer it refused (${gate?.role ?? "anonymous"})`);
  }
  // Behind the gate (holding another executor's credential of this node), claiming this executor: refused at the signed hello.
  const neighbour = gang.members[0]!.executorId;
  for (const routingId of [`x.${me.executorId}`, `x.attacker-${randomBytes(4).toString("hex")}`]) {
    const out = await attack(me.cache!, reads, {
      routingId,
      claim: { role: "executor", id: me.executorId, app: "victim" },
      gate: { role: "executor", id: neighbour, app: "victim", key: deriveKey(secret, "executor", neighbour, "victim") },
    });
    assert.deepEqual(out.replies, [], `the cache answered an unauthenticated peer (${routingId})`);
    assert.deepEqual(out.handshake.map((m) => m.t), REFUSED);
  }
});

test("an agent reports only its own executors: a forged exit does not fail a gang", async () => {
  const member = gang.members[0]!.executorId;
  // Without the secret: refused at the handshake.
  const anon = await attack(cluster.endpoint, [msg({ t: "exit", executor: member, code: 1, signal: null, detail: "forged" })], { routingId: "a.a1", claim: { role: "agent", id: "a1", app: "" } });
  assert.deepEqual(anon.replies, []);
  // With a real agent credential, but for an executor the head placed on another agent.
  const secret = loadSecret(secretFile());
  const forger = new RawClient(cluster.endpoint, `a.forger.${randomBytes(8).toString("hex")}`, { role: "agent", id: "forger", app: "", key: deriveKey(secret, "agent", "forger", "") });
  try {
    await forger.ready;
    await forger.sendFrames([pack({ t: "register", host: "127.0.0.1", pid: process.pid, cpu: 1, mem: 2 ** 28, gpus: [], labels: {}, executors: [] })]);
    await forger.waitFor((m) => m.header.t === "registered");
    await forger.sendFrames([pack({ t: "exit", executor: member, code: 1, signal: null, detail: "forged" })]);
    const refused = await forger.waitFor((m) => m.header.t === "err");
    assert.equal(refused.header.error.name, "AuthError");
    assert.match(refused.header.error.message, /runs on another agent/);
  } finally {
    await forger.close();
  }
  const answers = await gang.withOptions({ timeoutMs: 5000 }).broadcast("ping", [[], []]);
  assert.deepEqual(answers.map((a) => a.executorId), gang.members.map((m) => m.executorId));
  const st = await cluster.status();
  const crew = st.apps.find((a: any) => a.name === "victim").services.find((s: any) => s.name === "crew");
  assert.equal(crew.state, "ready");
  assert.ok(executorsOf(st, "victim", "crew").every((e: any) => e.state !== "dead"));
});

test("a driver of one app cannot open, read, call or inspect another app", async () => {
  const secret = loadSecret(secretFile());
  const credential = credentialFrom(secret, "driver", "other", "other");
  await assert.rejects(HeadClient.open(cluster.endpoint, { app: "victim" }, { credential, timeoutMs: 5000 }), (e: Error) => e.name === "AuthError" && /not 'victim'/.test(e.message));
  const other = (await HeadClient.open(cluster.endpoint, { app: "other" }, { credential })).client;
  try {
    await assert.rejects(other.control("status", { app: "victim" }), (e: Error) => e.name === "AuthError");
    await assert.rejects(other.call(pool.info.id, "ping", []), (e: Error) => e.name === "ServiceNotFoundError");
    await assert.rejects(other.request("obj-get", { key: "plans" }), (e: Error) => e.name === "ObjectNotFoundError");
    const mine = await other.control("status", {});
    assert.deepEqual(mine.apps.map((a: any) => a.name), ["other"]);
    await other.control("close-app", {});
  } finally {
    other.close();
  }
  // A wrong key for the right app is refused at the handshake, with a clear error.
  const wrong = { ...credential, id: "victim", app: "victim" };
  await assert.rejects(HeadClient.open(cluster.endpoint, { app: "victim" }, { credential: wrong, timeoutMs: 5000 }), (e: Error) => e.name === "AuthError" && /wrong credential/.test(e.message));
  await waitFor("the victim to keep its one driver", async () => ((await cluster.status()).apps.find((a: any) => a.name === "victim")?.drivers === 1 ? true : undefined));
});

test("a transfer id belongs to the app that opened it: another app can neither read, feed, commit nor end it", async () => {
  const secret = loadSecret(secretFile());
  const open = async (app: string) => (await HeadClient.open(cluster.endpoint, { app }, { credential: credentialFrom(secret, "driver", app, app) })).client;
  const owner = await open("victim");
  const other = await open("intruder");
  try {
    // A read transfer: an object over the inline limit is pulled in chunks under a tid.
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    await owner.request("obj-write", { write: "put", key: "big", kind: "bytes", size: big.length }, [big]);
    const got = (await owner.request("obj-get", { key: "big" })).value as { tid?: number };
    assert.equal(typeof got.tid, "number", "a chunked read was opened");
    const noRead = (e: Error) => e.name === "ProtocolError" && new RegExp(`no read transfer ${got.tid} in this app`).test(e.message);
    await assert.rejects(other.request("obj-read", { tid: got.tid, part: 0, offset: 0, length: 1024 }), noRead);
    await other.request("obj-done", { tid: got.tid }); // ending another app's read is a no-op
    const chunk = await owner.request("obj-read", { tid: got.tid, part: 0, offset: 0, length: 1024 });
    assert.deepEqual(chunk.frames[0], big.subarray(0, 1024), "the owner's read goes on, with its bytes");
    // A write transfer: chunks, then a commit.
    const begun = (await owner.request("obj-begin", { write: "put", key: "upload", kind: "bytes", size: 2 * 1024 * 1024 })).value as { tid: number };
    const noWrite = (e: Error) => e.name === "ProtocolError" && new RegExp(`no write transfer ${begun.tid} in this app`).test(e.message);
    await assert.rejects(other.request("obj-chunk", { tid: begun.tid, offset: 0 }, [Buffer.alloc(2 * 1024 * 1024, 1)]), noWrite);
    await assert.rejects(other.request("obj-commit", { tid: begun.tid }), noWrite);
    await owner.request("obj-chunk", { tid: begun.tid, offset: 0 }, [Buffer.alloc(2 * 1024 * 1024, 2)]);
    const committed = (await owner.request("obj-commit", { tid: begun.tid })).value as { version: number };
    assert.equal(committed.version, 1);
    const stored = await owner.request("obj-get", { key: "upload" });
    const tid = (stored.value as { tid?: number }).tid!;
    const bytes = await owner.request("obj-read", { tid, part: 0, offset: 0, length: 16 });
    assert.deepEqual(bytes.frames[0], Buffer.alloc(16, 2), "only the owner's chunk was written");
    await assert.rejects(other.request("obj-get", { key: "upload" }), (e: Error) => e.name === "ObjectNotFoundError");
    await owner.request("obj-delete", { key: "upload" });
    await owner.request("obj-delete", { key: "big" });
  } finally {
    await other.control("close-app", {}).catch(() => undefined);
    owner.close();
    other.close();
  }
});
