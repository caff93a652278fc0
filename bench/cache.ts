/**
 * `npm run bench -- cache`: (1) a 64 MiB put + get through the head against a
 * raw ZeroMQ round trip of the same bytes to a peer process, in the same run
 * (goal ≥ 0.7× the raw throughput); (2) a weight-like object that gets 20
 * appended patches, with an incremental get after each: bytes moved against
 * re-downloading the whole object each time (goal: only each new patch).
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Dealer } from "zeromq";
import { connect } from "../sdk/connect.js";
import { startCluster } from "../test/helpers/cluster.js";
import { table } from "./stats.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MiB = 1024 * 1024;

/** Best time (ms) of `reps` raw ZeroMQ round trips of `bytes` to an echo process (one frame each way). */
export async function rawRoundTrip(bytes: Buffer, reps: number): Promise<number> {
  const server = spawn(process.execPath, [path.join(HERE, "raw-echo-server.js")], { stdio: ["ignore", "pipe", "inherit"] });
  const [chunk] = (await once(server.stdout!, "data")) as [Buffer];
  const dealer = new Dealer({ sendHighWaterMark: 0, receiveHighWaterMark: 0 });
  dealer.connect(chunk.toString().trim());
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await dealer.send(bytes);
    await dealer.receive();
    best = Math.min(best, performance.now() - t0);
  }
  dealer.close();
  server.kill();
  return best;
}

/** Runs the benchmark and prints the tables. */
export async function benchCache(args: string[]): Promise<Record<string, number>> {
  const size = Number(args[0] ?? 64) * MiB;
  const reps = 3;
  const data = Buffer.alloc(size);
  for (let i = 0; i < size; i += 8) data.writeUInt32LE(i, i);
  const rawMs = await rawRoundTrip(data, reps);

  const cluster = await startCluster({ agents: [] });
  const app = await connect({ name: "bench-cache", head: cluster.endpoint });
  try {
    let best = Infinity;
    for (let i = 0; i < reps; i++) {
      await app.objects.delete("big");
      app.objects.forget("big");
      const t0 = performance.now();
      const ref = await app.objects.put(data, { key: "big" });
      const back = await app.objects.get<Buffer>(ref);
      best = Math.min(best, performance.now() - t0);
      if (back.length !== size) throw new Error("size mismatch");
    }
    const mb = (2 * size) / MiB;
    console.log(`${size / MiB} MiB there and back (best of ${reps}):\n`);
    console.log(
      table([
        { path: "raw zmq DEALER→echo ROUTER, one frame each way", ms: rawMs, "MiB/s": mb / (rawMs / 1000) },
        { path: "hearth put + get through the head (8 MiB chunks, 4 in flight)", ms: best, "MiB/s": mb / (best / 1000) },
      ]),
    );
    const ratio = rawMs / best;
    console.log(`\nthroughput ratio hearth/raw: ${ratio.toFixed(2)}× (goal ≥ 0.7×)\n`);

    // Weight-like object: base then 20 appended patches, an incremental get after each.
    const base = Buffer.alloc(32 * MiB, 1);
    const patchSize = MiB; // ~3 % of the base, like one AdamW step's bf16 changes
    const reader = app.objects;
    const ref = await app.objects.put(base, { key: "weights" });
    const fold = (acc: Buffer[], patches: unknown[]): Buffer[] => [...acc, ...(patches as Buffer[])];
    await reader.get(ref, { fold: (acc: unknown, p) => fold([acc as Buffer], p) });
    const s0 = reader.stats.bytesReceived;
    let full = 0;
    let perPatchOk = true;
    for (let i = 1; i <= 20; i++) {
      await app.objects.patch(ref, Buffer.alloc(patchSize, i));
      const before = reader.stats.bytesReceived;
      await reader.get(ref, { fold: (acc: unknown, p) => fold(Array.isArray(acc) ? (acc as Buffer[]) : [acc as Buffer], p) });
      if (reader.stats.bytesReceived - before !== patchSize) perPatchOk = false;
      full += base.length + i * patchSize;
    }
    const moved = reader.stats.bytesReceived - s0;
    console.log(
      table([
        { strategy: "incremental get after each patch", "MiB moved": moved / MiB },
        { strategy: "full re-download after each patch", "MiB moved": full / MiB },
      ]),
    );
    console.log(`\nbytes moved incremental/full: ${(moved / full).toFixed(4)}; each get moved only its new patch: ${perPatchOk ? "yes" : "NO"}`);
    return { rawMs, hearthMs: best, ratio, moved, full };
  } finally {
    await app.close();
    await cluster.stop();
  }
}
