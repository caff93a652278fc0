/**
 * `npm run bench -- rpc`: the round trip of an empty call driver → head →
 * executor → driver, against a raw ZeroMQ DEALER/ROUTER echo in another
 * process measured in the same run. Goals: p50 ≤ 2× the raw round trip, and
 * ≥ 5,000 calls/s with 4 executors.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Dealer } from "zeromq";
import { connect } from "../sdk/connect.js";
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

/** Runs the benchmark and prints the table; returns the results. */
export async function benchRpc(args: string[]): Promise<Record<string, number>> {
  const n = Number(args[0] ?? 3000);
  const window = 256;
  const raw = await rawEcho(n, window);
  const relayLat = await rawRelay(n);

  const cluster = await startCluster({ agents: [{ id: "bench", cpus: 8, mem: "8g" }] });
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

    const rawP50 = quantile(raw.lat, 0.5);
    const p50 = quantile(lat, 0.5);
    console.log(
      table([
        { path: "raw zmq DEALER/ROUTER echo", "p50 µs": rawP50, "p99 µs": quantile(raw.lat, 0.99), "calls/s (pipelined)": Math.round(raw.perSec) },
        { path: "raw zmq relay, same hops as hearth", "p50 µs": quantile(relayLat, 0.5), "p99 µs": quantile(relayLat, 0.99), "calls/s (pipelined)": "-" },
        { path: "hearth driver→head→executor (1 executor)", "p50 µs": p50, "p99 µs": quantile(lat, 0.99), "calls/s (pipelined)": "-" },
        { path: `hearth, 4 executors, window ${window}`, "p50 µs": "-", "p99 µs": "-", "calls/s (pipelined)": Math.round(perSec) },
      ]),
    );
    const ratio = p50 / rawP50;
    console.log(`\nround-trip ratio hearth/raw echo (p50): ${ratio.toFixed(2)}× (goal ≤ 2×)`);
    console.log(`hops alone (raw relay/raw echo, p50): ${(quantile(relayLat, 0.5) / rawP50).toFixed(2)}×; hearth over the raw relay: ${(p50 / quantile(relayLat, 0.5)).toFixed(2)}×`);
    console.log(`throughput with 4 executors: ${Math.round(perSec)} calls/s (goal ≥ 5,000)`);
    return { rawP50, relayP50: quantile(relayLat, 0.5), p50, ratio, perSec, rawPerSec: raw.perSec };
  } finally {
    await app.close();
    await cluster.stop();
  }
}
