/**
 * Connections the head refuses are closed, not just forgotten: a real head
 * judges each connection in the ZeroMQ handshake (its gate), so anonymous
 * sockets — no credential at all — are closed there and cost it no file
 * descriptor (counted in /proc/<pid>/fd), and one source address holds at
 * most --max-connections-per-source connections while another source at the
 * same time is let in (the cap is per source, not global). The agent's cache
 * takes connections on their executor credential from any source. Legitimate
 * drivers keep working throughout.
 */
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { after, test } from "node:test";
import { pack } from "msgpackr";
import { Dealer } from "zeromq";
import { connect } from "../../sdk/connect.js";
import { AuthError } from "../../sdk/wire/errors.js";
import path from "node:path";
import { DIST, rejection, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import { rawCredential, rawGate } from "../helpers/raw-client.js";
import { outsider } from "./peers.js";
import type { Vault } from "./services.js";

const VAULT = { module: path.join(DIST, "test/security/services.js"), export: "Vault" };

const clusters: TestCluster[] = [];
const sockets: Dealer[] = [];

after(async () => {
  for (const s of sockets) s.close();
  for (const c of clusters) await c.stop();
});

/** Open file descriptors of process `pid`. */
function fds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** How a socket's connection ended up: "handshake" (let in), or the refusal the monitor reported; never settles while neither happened. */
function outcome(socket: Dealer): Promise<string> {
  return new Promise((resolve) => {
    socket.events.on("handshake", () => resolve("handshake"));
    for (const t of ["handshake:error:protocol", "handshake:error:auth", "handshake:error:other"] as const) socket.events.on(t, () => resolve("refused"));
  });
}

/**
 * The endpoint that dials `endpoint` (tcp://HOST:PORT) from local address
 * `source` (ZeroMQ's `tcp://SOURCE:0;HOST:PORT`): every 127.x.y.z address is
 * this machine's loopback, so one test can be several sources.
 */
function from(source: string, endpoint: string): string {
  return endpoint.replace(/^tcp:\/\//, `tcp://${source}:0;`);
}

/** Opens `n` sockets (no reconnecting: each one connection) with `opts`, each sending a hello; returns each one's outcome within `timeoutMs` ("pending" if none). */
async function openMany(endpoint: string, n: number, opts: Record<string, unknown>, timeoutMs = 8000): Promise<string[]> {
  const outcomes: Array<Promise<string>> = [];
  for (let i = 0; i < n; i++) {
    const s = new Dealer({ linger: 0, reconnectInterval: 600_000, ...opts });
    sockets.push(s);
    outcomes.push(outcome(s));
    s.connect(endpoint);
    void s.send([pack({ t: "req", rid: 1, op: "hello", app: `flood-${i}` })]).catch(() => undefined);
  }
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<"pending">((r) => (timer = setTimeout(() => r("pending"), timeoutMs)));
  const settled = await Promise.all(outcomes.map((o) => Promise.race([o, timeout])));
  clearTimeout(timer);
  return settled;
}

test("200 anonymous sockets are closed in the handshake: the head's descriptors stay where they were, and it keeps serving", { timeout: 60_000 }, async () => {
  const cluster = await startCluster({ agents: [] });
  clusters.push(cluster);
  const pid = cluster.head.pid!;
  const before = fds(pid);
  const outcomes = await openMany(cluster.endpoint, 200, {}, 8000);
  const during = fds(pid);
  assert.ok(during <= before + 10, `the head holds ${during} descriptors with 200 anonymous sockets open (${before} before)`);
  const refused = outcomes.filter((o) => o === "refused").length;
  assert.equal(refused, 200, `every anonymous connection is refused in the handshake (${JSON.stringify(outcomes.slice(0, 5))}…)`);
  const status = await cluster.status();
  assert.ok(status.head.refusedConnections >= 200, `status counts them: ${status.head.refusedConnections}`);
  assert.ok(!status.apps.some((a: any) => String(a.name).startsWith("flood-")), "no anonymous hello ran");
  const app = await connect({ name: "after-flood", head: cluster.endpoint });
  try {
    assert.deepEqual(await app.objects.get(await app.objects.put({ ok: 1 })), { ok: 1 });
  } finally {
    await app.close();
  }
});

test("one source holds at most --max-connections-per-source connections; more are closed in the handshake, with a clear error for a driver", { timeout: 60_000 }, async () => {
  const cluster = await startCluster({ agents: [], headArgs: ["--max-connections-per-source", "8"] });
  clusters.push(cluster);
  const pid = cluster.head.pid!;
  const before = fds(pid); // with the test's observer connection: 1 of the 8
  // 20 connections that pass the credential check (an unrelated app's token), all from 127.0.0.1.
  // A burst first: the gate counts the source's established connections, its own pending ones included, so
  // a burst may be cut below the limit, never above it.
  const flood = sockets.length;
  const burst = await openMany(cluster.endpoint, 20, rawGate(outsider()));
  const inBurst = burst.filter((o) => o === "handshake").length;
  assert.ok(inBurst <= 7, `at most 7 admitted beside the observer in a burst (outcomes: ${JSON.stringify(burst)})`);
  assert.equal(burst.filter((o) => o === "refused").length, 20 - inBurst, "the rest refused in the handshake");
  for (const s of sockets.splice(flood)) s.close();
  await waitFor("the burst's connections to close", async () => ((await cluster.status()) && fds(pid) <= before + 2 ? true : undefined), 10_000);
  // One after another: exactly the limit is admitted.
  const outcomes: string[] = [];
  for (let i = 0; i < 20; i++) outcomes.push(...(await openMany(cluster.endpoint, 1, rawGate(outsider()))));
  const admitted = outcomes.filter((o) => o === "handshake").length;
  assert.equal(admitted, 7, `7 admitted beside the observer (outcomes: ${JSON.stringify(outcomes)})`);
  assert.equal(outcomes.filter((o) => o === "refused").length, 13);
  assert.ok(fds(pid) <= before + 7 + 4, `the head holds ${fds(pid)} descriptors (${before} before)`);
  // The cap is per source, not global: at 127.0.0.1's cap another source is let in (as many as its own cap), and
  // taking those does not make room for 127.0.0.1.
  const other = [];
  for (let i = 0; i < 9; i++) other.push(...(await openMany(from("127.0.0.2", cluster.endpoint), 1, rawGate(outsider()))));
  assert.deepEqual(other, [...Array<string>(8).fill("handshake"), "refused"], "127.0.0.2 holds its own 8, then is refused too");
  assert.deepEqual(await openMany(cluster.endpoint, 1, rawGate(outsider())), ["refused"], "127.0.0.1 is still at its cap");
  const status = await cluster.status();
  assert.ok(!status.apps.some((a: any) => String(a.name).startsWith("flood-")), "no flood hello ran (the outsider's token opens its own app only)");
  const { error } = await rejection(connect({ name: "crowded", head: cluster.endpoint, timeoutMs: 5000 }));
  assert.ok(error instanceof AuthError, `${error.name}: ${error.message}`);
  assert.match(error.message, /refused this connection in the ZeroMQ handshake.*--max-connections-per-source/);
  // The source's connections end: there is room again.
  for (const s of sockets.splice(flood)) s.close();
  await waitFor("the flood's connections to close", async () => ((await cluster.status()) && fds(pid) <= before + 2 ? true : undefined), 10_000);
  const app = await connect({ name: "roomy", head: cluster.endpoint });
  await app.close();
});

test("the agent's cache caps connections per source: at 127.0.0.1's cap a connection from 127.0.0.2 is let in; one without an executor credential is refused from anywhere", { timeout: 60_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "c1", cpus: 2, mem: "1g", args: ["--cache-max-connections-per-source", "8"] }] });
  clusters.push(cluster);
  const app = await connect({ name: "cache-sources", head: cluster.endpoint });
  try {
    const pool = await app.service<Vault>(VAULT, { name: "vault", warmup: 1 });
    const me = await pool.call("identity");
    assert.match(me.cache!, /^tcp:\/\/127\.0\.0\.1:\d+$/, "the cache listens on loopback");
    const executor = rawGate(rawCredential("executor", me.executorId, "cache-sources"));
    const flood = sockets.length;
    // The executor's own connection is one of 127.0.0.1's: 7 more fill the cap, the next is refused. One at a time: the
    // gate counts connections still in their handshake too, so a burst may be cut below the cap (never above it).
    const local: string[] = [];
    for (let i = 0; i < 8; i++) local.push(...(await openMany(me.cache!, 1, executor)));
    assert.deepEqual(local, [...Array<string>(7).fill("handshake"), "refused"], "127.0.0.1 holds 8 connections, then is refused");
    assert.deepEqual(await openMany(from("127.0.0.2", me.cache!), 1, executor), ["handshake"], "one from 127.0.0.2 is let in: the cap is per source, not global");
    assert.deepEqual(await openMany(from("127.0.0.2", me.cache!), 1, {}), ["refused"], "an anonymous connection from 127.0.0.2 is closed in the handshake");
    assert.deepEqual(await openMany(from("127.0.0.2", me.cache!), 1, rawGate(outsider())), ["refused"], "so is a driver's credential (only this node's executors and other nodes read its cache)");
    for (const s of sockets.splice(flood)) s.close();
    // The executor itself still reads through its cache.
    await app.objects.put({ ok: 1 }, { key: "k" });
    assert.deepEqual(await pool.call("read", "k"), { ok: 1 });
  } finally {
    await app.close();
  }
});
