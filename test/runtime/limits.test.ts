/**
 * Connection and message limits on a real head, each with a clear error:
 * proven connections in total, per app (drivers) and agents, connections
 * waiting to prove a credential, and the frames and total bytes of one
 * message (channel.ts checks them before anything decodes or forwards it).
 */
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { pack } from "msgpackr";
import { connect } from "../../sdk/connect.js";
import { AuthError } from "../../sdk/wire/errors.js";
import { startCluster, waitFor } from "../helpers/cluster.js";
import { RawClient, rawAdminCredential, rawCredential, type RawCredential } from "../helpers/raw-client.js";

/** A driver credential for `app`, derived from the cluster secret as docs/protocol.md describes. */
function driverCredential(app: string): RawCredential {
  const home = process.env.HEARTH_HOME ?? path.join(os.homedir(), ".hearth");
  const secret = Buffer.from(readFileSync(path.join(home, "secret"), "utf8").trim(), "hex");
  return { role: "driver", id: app, app, key: createHmac("sha256", secret).update(`hearth/app\0${app}`).digest() };
}

/** Opens raw clients one after another; each resolves with its client, or the refusal. */
async function openAll(endpoint: string, creds: RawCredential[], into: RawClient[]): Promise<Array<Error | undefined>> {
  const out: Array<Error | undefined> = [];
  for (const c of creds) {
    const r = new RawClient(endpoint, undefined, c);
    into.push(r);
    out.push(await r.ready.then(() => undefined, (e: Error) => e));
  }
  return out;
}

test("a driver connection beyond --max-drivers-per-app is refused, naming the limit and the flag; other apps are unaffected", async () => {
  const cluster = await startCluster({ agents: [], headArgs: ["--max-drivers-per-app", "2"] });
  const raws: RawClient[] = [];
  try {
    const [a, b, c] = await openAll(cluster.endpoint, [driverCredential("lim"), driverCredential("lim"), driverCredential("lim")], raws);
    assert.equal(a, undefined);
    assert.equal(b, undefined);
    assert.match(String(c), /AuthError: .*app 'lim' already has its maximum of 2 driver connections \(hearth head --max-drivers-per-app\)/);
    const [other] = await openAll(cluster.endpoint, [driverCredential("other")], raws);
    assert.equal(other, undefined, "another app's drivers count separately");
    // The two admitted drivers still work.
    await raws[0]!.request("hello", { app: "lim" });
    await raws[1]!.request("hello", { app: "lim" });
    // The SDK's connect() ends with the same error instead of waiting.
    await assert.rejects(connect({ name: "lim", head: cluster.endpoint }), (e: unknown) => e instanceof AuthError && /maximum of 2 driver connections \(hearth head --max-drivers-per-app\)/.test(e.message));
  } finally {
    for (const r of raws) await r.close();
    await cluster.stop();
  }
});

test("connections beyond --max-peers and agents beyond --max-agents are refused with the limit and the flag", async () => {
  const cluster = await startCluster({ agents: [], headArgs: ["--max-peers", "3", "--max-agents", "1"] });
  const raws: RawClient[] = [];
  try {
    // Bound now: the test observer (admin). One agent fits, a second does not.
    const [agent1, agent2] = await openAll(cluster.endpoint, [rawCredential("agent", "a1"), rawCredential("agent", "a2")], raws);
    assert.equal(agent1, undefined);
    assert.match(String(agent2), /AuthError: .*maximum of 1 agents \(hearth head --max-agents\)/);
    // Observer + agent + one admin = 3 = --max-peers; the next is refused.
    const [admin1, admin2] = await openAll(cluster.endpoint, [rawAdminCredential(), rawAdminCredential()], raws);
    assert.equal(admin1, undefined);
    assert.match(String(admin2), /AuthError: .*maximum of 3 connections \(hearth head --max-peers\)/);
    assert.match(cluster.headLog(), /refused a peer .*--max-peers/);
  } finally {
    for (const r of raws) await r.close();
    await cluster.stop();
  }
});

test("connections waiting to prove a credential are bounded by --max-unproven: the oldest is dropped", async () => {
  const cluster = await startCluster({ agents: [], headArgs: ["--max-unproven", "2"] });
  const raws: RawClient[] = [];
  try {
    const ids = ["d.unproven-1", "d.unproven-2", "d.unproven-3"].map((s) => `${s}-${process.pid}`);
    for (const id of ids) {
      // Past the connection gate (an admin's gate proof), but it never answers the signed hello's challenge.
      const r = new RawClient(cluster.endpoint, id, null, rawAdminCredential());
      raws.push(r);
      // An unproven peer's message is held and answered with a challenge.
      await r.sendFrames([pack({ t: "req", rid: 1, op: "hello", app: "held" })]);
      await waitFor(`a challenge for ${id}`, () => (r.handshake.some((m) => m.t === "challenge") ? true : undefined), 5000);
    }
    // The first peer's challenge was dropped when the third arrived: its proof is refused and its held hello never runs.
    const first = raws[0]!;
    const { nonce } = first.handshake.find((m) => m.t === "challenge");
    const cred = rawAdminCredential();
    const mac = createHmac("sha256", cred.key).update(`hearth-auth-v1\0${cred.role}\0${cred.id}\0${cred.app}\0`).update(nonce).update(Buffer.from(ids[0]!)).digest();
    await first.socket.send([Buffer.from("\0hearth-auth"), pack({ t: "auth", role: cred.role, id: cred.id, app: cred.app, mac })]);
    const answer = await waitFor("the head's answer to the dropped peer", () => first.handshake.find((m) => m.t === "auth-ok" || m.t === "auth-failed"), 5000);
    assert.equal(answer.t, "auth-failed", "the oldest unproven peer was dropped beyond --max-unproven 2");
    assert.match(answer.error.message, /an 'auth' without a challenge/);
    assert.equal(first.received.length, 0, "its held hello was dropped, not delivered");
  } finally {
    for (const r of raws) await r.close();
    await cluster.stop();
  }
});

test("a message with too many frames, or over the whole-message limit in frames each under the per-frame cap, is refused and not processed", async () => {
  const cluster = await startCluster({ agents: [] });
  const raw = new RawClient(cluster.endpoint);
  try {
    const tiny = Buffer.alloc(1);
    await raw.sendFrames([pack({ t: "req", rid: 11, op: "hello", app: "frames" }), tiny, tiny, tiny, tiny]);
    const many = await raw.waitFor((m) => m.header.rid === 11);
    assert.equal(many.header.ok, false);
    assert.equal(many.header.error.name, "MessageTooLargeError");
    assert.match(many.header.error.message, /a message of 5 frames was refused: at most 4 frames/);
    // Three frames of 9 MiB: each is under ZeroMQ's 64 MiB per-frame cap, together over 16 MiB.
    const nine = Buffer.alloc(9 * 1024 * 1024);
    await raw.sendFrames([pack({ t: "req", rid: 12, op: "hello", app: "frames" }), nine, nine]);
    const big = await raw.waitFor((m) => m.header.rid === 12);
    assert.equal(big.header.ok, false);
    assert.match(big.header.error.message, /a message of 18\.0 MiB in 3 frames was refused: over the 16 MiB limit on a whole message/);
    // Neither hello ran: the app does not exist until a hello within the limits.
    const status = await cluster.status();
    assert.ok(!status.apps.some((a: { name: string }) => a.name === "frames"), "a refused message is not processed");
    await raw.request("hello", { app: "frames" });
    assert.ok((await cluster.status()).apps.some((a: { name: string }) => a.name === "frames"));
  } finally {
    await raw.close();
    await cluster.stop();
  }
});
