/** Large test files that no two MiB of are alike, written a MiB at a time (nothing of them is whole in memory). */
import { createHash } from "node:crypto";
import { closeSync, openSync, writeSync } from "node:fs";

const MiB = 1024 * 1024;

/** Writes `mib` MiB into `file` from `seed`; returns their sha256 (hex). */
export function writePattern(file: string, mib: number, seed: number): string {
  const h = createHash("sha256");
  const fd = openSync(file, "w");
  const block = Buffer.alloc(MiB);
  for (let i = 0; i < block.length; i += 4) block.writeUInt32LE((i * 2654435761 + seed) >>> 0, i);
  try {
    for (let m = 0; m < mib; m++) {
      block.writeUInt32LE(m ^ seed, 0);
      writeSync(fd, block);
      h.update(block);
    }
  } finally {
    closeSync(fd);
  }
  return h.digest("hex");
}
