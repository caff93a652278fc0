/**
 * The peer `bench weights` measures the object path against: a raw ZeroMQ
 * stream of the same bytes with the same chunking (8 MiB chunks, 4 requests
 * in flight, one process asking another), into memory and into a file, as a
 * node cache's copy is written.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { closeSync, openSync, rmSync, write as writeCb } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Dealer } from "zeromq";
import { CHUNK, WINDOW } from "../sdk/cache/transfer.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const writeAt = promisify(writeCb);
const MiB = 1024 * 1024;

/**
 * MiB/s of pulling `bytes` from the raw peer in CHUNK pieces, WINDOW in
 * flight (into a new file under `dir`, default the temp folder, when
 * `toFile`: the rate a copy on that medium cannot beat).
 */
export async function rawStream(bytes: number, toFile: boolean, dir = os.tmpdir()): Promise<number> {
  const server = spawn(process.execPath, [path.join(HERE, "raw-stream-server.js")], { stdio: ["ignore", "pipe", "inherit"] });
  const [line] = (await once(server.stdout!, "data")) as [Buffer];
  const dealer = new Dealer({ sendHighWaterMark: 0, receiveHighWaterMark: 0 });
  dealer.connect(line.toString().trim());
  const file = path.join(dir, `hearth-raw-stream-${process.pid}`);
  const fd = toFile ? openSync(file, "w", 0o600) : undefined;
  try {
    const t0 = performance.now();
    let sent = 0;
    let received = 0;
    const ask = async (): Promise<void> => {
      const length = Math.min(CHUNK, bytes - sent);
      sent += length;
      await dealer.send(JSON.stringify({ length }));
    };
    for (let i = 0; i < WINDOW && sent < bytes; i++) await ask();
    while (received < bytes) {
      const [chunk] = await dealer.receive();
      if (fd !== undefined) await writeAt(fd, chunk!, 0, chunk!.byteLength, received);
      received += chunk!.byteLength;
      if (sent < bytes) await ask();
    }
    return bytes / MiB / ((performance.now() - t0) / 1000);
  } finally {
    if (fd !== undefined) closeSync(fd);
    rmSync(file, { force: true });
    dealer.close();
    server.kill();
  }
}
