/**
 * `npm run bench -- rpc`: the round trip of an empty call driver → head →
 * executor → driver, against a raw ZeroMQ DEALER/ROUTER echo in another
 * process measured in the same run. Goals: p50 ≤ 2× the raw round trip, and
 * ≥ 5,000 calls/s with 4 executors. hearth is always authenticated (a signed
 * hello per connection, docs/architecture.md); the bench also runs it with
 * CURVE encryption on top, times a connection's handshake (signed hello +
 * app hello) against a raw DEALER's first round trip, and times what
 * authentication adds to each message against an unauthenticated hand-off.
 */
import { mkdtempSync } from "node:fs";
import os from "node:os";
import { spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Dealer } from "zeromq";
import { connect } from "../sdk/connect.js";
import { HeadClient } from "../sdk/runtime/head-client.js";
import { CURVE_KEYS_ENV, ensureCurveKeys } from "../sdk/wire/curve.js";
import { authMac } from "../sdk/wire/auth.js";
import { AUTH_MARK, Authenticator, type Peer } from "../sdk/wire/authenticator.js";
import { decode, encode } from "../sdk/wire/codec.js";
import { startCluster } from "../test/helpers/cluster.js";
import { quantile, table } from "./stats.js";
import type { Noop } from "./noop-service.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));

async function rawEcho(n: number, pipelined: number): Promise<{ lat: number[]; perSec: number }> {
  const server = spawn(process.execPath, [path.join(HERE, "raw-echo-server.js")], { stdio: ["ignore", "pipe", "inherit"] });
  const [chunk] = (await once(server.stdout!, "data")) as [Buffer];
  const dealer = new Dealer({ sendHighWaterMark: 0, receiveHighWaterMark: 0 });
  dealer.connect(chunk.toString().trim());
  const msg = [Buffer.from("hdr-ping"), Buffer.from([0x90])];
  const lat: number[] = [];
  for (let i = 0; i < n + 200; i++) {
    const t = process.hrtime.bigint();
    await dealer.send(msg);
    await dealer.receive();
    if (i >= 200) lat.push(Number(process.hrtime.bigint() - t) / 1e3);
  }
  // Throughput with `pipelined` messages in flight.
  const total = n * 5;
  const t0 = performance.now();
  let sent = 0;
  for (; sent < Math.min(pipelined, total); sent++) await dealer.send(msg);
  for (let got = 0; got < total; got++) {
    await dealer.receive();
    if (sent < total) {
      await dealer.send(msg);
      sent++;
    }
  }
  const perSec = total / ((performance.now() - t0) / 1000);
  dealer.close();
  server.kill();
  return { lat, perSec };
}

async function rawRelay(n: number): Promise<number[]> {
  const relay = spawn(process.execPath, [path.join(HERE, "raw-relay.js"), "relay"], { stdio: ["ignore", "pipe", "inherit"] });
  const [chunk] = (await once(relay.stdout!, "data")) as [Buffer];
  const endpoint = chunk.toString().trim();
  const worker = spawn(process.execPath, [path.join(HERE, "raw-relay.js"), "worker", endpoint], { stdio: "inherit" });
  const dealer = new Dealer({ routingId: "driver", sendHighWaterMark: 0, receiveHighWaterMark: 0 });
  dealer.connect(endpoint);
  await new Promise((r) => setTimeout(r, 300));
  const lat: number[] = [];
  for (let i = 0; i < n + 200; i++) {
    const t = process.hrtime.bigint();
    await dealer.send([Buffer.from("hdr-ping"), Buffer.from([0x90])]);
    await dealer.receive();
    if (i >= 200) lat.push(Number(process.hrtime.bigint() - t) / 1e3);
  }
  dealer.close();
  worker.kill();
  relay.kill();
  return lat;
}

/** Time to a raw DEALER's first echo (connect included), in µs. */
async function rawFirstTrip(count: number): Promise<number[]> {
  const server = spawn(process.execPath, [path.join(HERE, "raw-echo-server.js")], { stdio: ["ignore", "pipe", "inherit"] });
  const [chunk] = (await once(server.stdout!, "data")) as [Buffer];
  const lat: number[] = [];
  for (let i = 0; i < count; i++) {
    const t = process.hrtime.bigint();
    const dealer = new Dealer({ linger: 0 });
    dealer.connect(chunk.toString().trim());
    await dealer.send([Buffer.from("hdr-ping"), Buffer.from([0x90])]);
    await dealer.receive();
    lat.push(Number(process.hrtime.bigint() - t) / 1e3);
    dealer.close();
  }
  server.kill();
  return lat;
}

/** Time for HeadClient.open (signed hello, then the app hello), in µs. */
async function hearthConnect(endpoint: string, count: number): Promise<number[]> {
  const lat: number[] = [];
  for (let i = 0; i < count; i++) {
    const t = process.hrtime.bigint();
    const { client } = await HeadClient.open(endpoint, { app: "bench-rpc" });
    lat.push(Number(process.hrtime.bigint() - t) / 1e3);
    client.close();
  }
  return lat;
}

/** Sequential empty calls through a cluster with CURVE on (head, agent and driver share one key file). */
async function curveRoundTrip(n: number): Promise<number[]> {
  const keys = path.join(mkdtempSync(path.join(os.tmpdir(), "hearth-bench-curve-")), "curve-keys.json");
  ensureCurveKeys(keys);
  const before = process.env[CURVE_KEYS_ENV];
  process.env[CURVE_KEYS_ENV] = keys;
  const cluster = await startCluster({ agents: [{ id: "bench-curve", cpus: 2, mem: "2g", args: ["--curve-keys", keys] }], headArgs: ["--curve-keys", keys] });
  const app = await connect({ name: "bench-rpc-curve", head: cluster.endpoint });
  try {
    const one = await app.service<Noop>({ module: path.join(HERE, "noop-service.js"), export: "Noop" }, { name: "one", resreq: "cpu=1", warmup: 1, max: 1 });
    const lat: number[] = [];
    for (let i = 0; i < n + 200; i++) {
      const t = process.hrtime.bigint();
      await one.call("ping");
      if (i >= 200) lat.push(Number(process.hrtime.bigint() - t) / 1e3);
    }
    return lat;
  } finally {
    await app.close();
    await cluster.stop();
    if (before === undefined) delete process.env[CURVE_KEYS_ENV];
    else process.env[CURVE_KEYS_ENV] = before;
  }
}

/**
 * What authentication adds to every message after the handshake, in ns: the
 * head's Authenticator.receive for a bound peer against handing the same
 * message straight to the handler (what the head did before authentication).
 */
function authPerMessage(count: number): { authNs: number; plainNs: number } {
  let delivered = 0;
  const sink = (_p: Peer | null, frames: Buffer[]): void => {
    delivered += frames.length;
  };
  let challenge: Buffer | undefined;
  const auth = new Authenticator({
    name: "bench",
    keyFor: () => Buffer.alloc(32, 7),
    send: (_id, frames) => {
      const m = decode(frames[1] as Buffer) as { t: string; nonce?: Uint8Array };
      if (m.t === "challenge") challenge = Buffer.from(m.nonce!);
    },
    deliver: (peer, frames) => sink(peer, frames),
    log: () => {},
  });
  const id = Buffer.from("d.bench-driver.0123456789abcdef");
  auth.receive(id, [AUTH_MARK, encode({ t: "auth-start" })]);
  const mac = authMac(Buffer.alloc(32, 7), challenge!, id, "driver", "bench", "bench");
  auth.receive(id, [AUTH_MARK, encode({ t: "auth", role: "driver", id: "bench", app: "bench", mac })]);
  if (!auth.peer(id)) throw new Error("bench: the in-process handshake did not bind the peer");
  const frames = [encode({ t: "call", cid: 1, service: "one", method: "ping" }), Buffer.from([0x90])];
  const time = (f: () => void): number => {
    for (let i = 0; i < 10_000; i++) f();
    const t = process.hrtime.bigint();
    for (let i = 0; i < count; i++) f();
    return Number(process.hrtime.bigint() - t) / count;
  };
  const plainNs = time(() => sink(null, frames));
  const authNs = time(() => auth.receive(id, frames));
  if (delivered === 0) throw new Error("bench: nothing was delivered");
  return { authNs, plainNs };
}

/** Runs the benchmark and prints the table; returns the results. */
export async function benchRpc(args: string[]): Promise<Record<string, number>> {
  const n = Number(args[0] ?? 3000);
  const window = 256;
  const raw = await rawEcho(n, window);
  const relayLat = await rawRelay(n);

  // The connect timing opens up to 100 driver connections in turn; closed ones count until they fall silent.
  const cluster = await startCluster({ agents: [{ id: "bench", cpus: 8, mem: "8g" }], headArgs: ["--max-drivers-per-app", "1000"] });
  const app = await connect({ name: "bench-rpc", head: cluster.endpoint });
  try {
    const module = path.join(HERE, "noop-service.js");
    const one = await app.service<Noop>({ module, export: "Noop" }, { name: "one", resreq: "cpu=1", warmup: 1, max: 1 });
    const lat: number[] = [];
    for (let i = 0; i < n + 200; i++) {
      const t = process.hrtime.bigint();
      await one.call("ping");
      if (i >= 200) lat.push(Number(process.hrtime.bigint() - t) / 1e3);
    }
    const four = await app.service<Noop>({ module, export: "Noop" }, { name: "four", resreq: "cpu=1", warmup: 4, max: 4, concurrency: 8 });
    const total = n * 5;
    for await (const _ of four.map("ping", Array.from({ length: 2000 }, () => [] as []), { window })) void _;
    const t0 = performance.now();
    let done = 0;
    for await (const _ of four.map("ping", Array.from({ length: total }, () => [] as []), { window })) done++;
    const perSec = done / ((performance.now() - t0) / 1000);
    const connects = Math.max(10, Math.min(100, Math.round(n / 30)));
    const hello = await hearthConnect(cluster.endpoint, connects);
    const rawFirst = await rawFirstTrip(connects);
    const curveLat = await curveRoundTrip(n);
    const perMessage = authPerMessage(1_000_000);

    const rawP50 = quantile(raw.lat, 0.5);
    const p50 = quantile(lat, 0.5);
    console.log(
      table([
        { path: "raw zmq DEALER/ROUTER echo", "p50 µs": rawP50, "p99 µs": quantile(raw.lat, 0.99), "calls/s (pipelined)": Math.round(raw.perSec) },
        { path: "raw zmq relay, same hops as hearth", "p50 µs": quantile(relayLat, 0.5), "p99 µs": quantile(relayLat, 0.99), "calls/s (pipelined)": "-" },
        { path: "hearth driver→head→executor, authenticated (1 executor)", "p50 µs": p50, "p99 µs": quantile(lat, 0.99), "calls/s (pipelined)": "-" },
        { path: "hearth, authenticated + CURVE encryption (1 executor)", "p50 µs": quantile(curveLat, 0.5), "p99 µs": quantile(curveLat, 0.99), "calls/s (pipelined)": "-" },
        { path: `hearth, 4 executors, window ${window}`, "p50 µs": "-", "p99 µs": "-", "calls/s (pipelined)": Math.round(perSec) },
        { path: "raw zmq: connect + first echo", "p50 µs": quantile(rawFirst, 0.5), "p99 µs": quantile(rawFirst, 0.99), "calls/s (pipelined)": "-" },
        { path: "hearth: connect (signed hello + app hello)", "p50 µs": quantile(hello, 0.5), "p99 µs": quantile(hello, 0.99), "calls/s (pipelined)": "-" },
      ]),
    );
    const ratio = p50 / rawP50;
    const curveRatio = quantile(curveLat, 0.5) / rawP50;
    console.log(`\nround-trip ratio hearth (authenticated)/raw echo (p50): ${ratio.toFixed(2)}× (goal ≤ 2×; before authentication 2.5–3.2×, docs/results.md)`);
    const authUs = (2 * (perMessage.authNs - perMessage.plainNs)) / 1000;
    console.log(`with CURVE encryption on top: ${curveRatio.toFixed(2)}×`);
    console.log(
      `authentication per message after the handshake: ${perMessage.authNs.toFixed(0)} ns (unauthenticated hand-off: ${perMessage.plainNs.toFixed(0)} ns); ` +
        `a call's 2 messages into the head: +${authUs.toFixed(2)} µs, ${((100 * authUs) / p50).toFixed(2)}% of its p50`,
    );
    console.log(`connect: hearth ${(quantile(hello, 0.5) / quantile(rawFirst, 0.5)).toFixed(2)}× a raw DEALER's connect + first echo (p50)`);
    console.log(`hops alone (raw relay/raw echo, p50): ${(quantile(relayLat, 0.5) / rawP50).toFixed(2)}×; hearth over the raw relay: ${(p50 / quantile(relayLat, 0.5)).toFixed(2)}×`);
    console.log(`throughput with 4 executors: ${Math.round(perSec)} calls/s (goal ≥ 5,000)`);
    return { authNs: perMessage.authNs, plainNs: perMessage.plainNs, rawP50, relayP50: quantile(relayLat, 0.5), p50, ratio, curveP50: quantile(curveLat, 0.5), curveRatio, connectP50: quantile(hello, 0.5), rawConnectP50: quantile(rawFirst, 0.5), perSec, rawPerSec: raw.perSec };
  } finally {
    await app.close();
    await cluster.stop();
  }
}
