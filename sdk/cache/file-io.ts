/**
 * Reading and writing the files object parts live in, whole or not at all,
 * and checking that their bytes are the ones written.
 *
 * A write to a file (`write(2)`, Node's `fs.write`) may take fewer bytes
 * than it was given and report no error: a file system that fills in the
 * middle of an 8 MiB chunk writes what fits and returns the count; only the
 * next write fails with ENOSPC. A caller that counts the chunk as written
 * leaves a hole, and if room comes back before its next chunk (a cache
 * evicted something) the part commits at its full size with zeros inside.
 * `writeAll` writes until every byte is down or an error comes.
 *
 * Every part carries its chunk sums: the CRC-32 of each CHUNK-sized piece
 * (the last one shorter), computed while the bytes stream (~5 GB/s here, a
 * few ms per chunk). The store records them when a part is received and
 * every reader of a file checks the chunks it reads against them, so bytes
 * that changed on disk (a hole, a torn write, a disk's fault, a hand that
 * edited the file) are refused at read with an ObjectCorruptError naming the
 * object, the part and the offset, never served.
 */
import { read as readCb, write as writeCb, writeSync } from "node:fs";
import { open } from "node:fs/promises";
import { promisify } from "node:util";
import { crc32 } from "node:zlib";
import { HearthError, ObjectCorruptError } from "../errors/index.js";

const readAt = promisify(readCb);
const writeAt = promisify(writeCb);

/** Chunk size of streamed transfers and of chunk sums (transfer.ts re-exports it). */
export const CHUNK = 8 * 1024 * 1024;

/** An error for a write that took no byte and raised nothing (the kernel says ENOSPC on the next try; this one says it now). */
function noProgress(file: string, position: number, left: number): NodeJS.ErrnoException {
  return Object.assign(new Error(`a write to ${file} at ${position} took 0 of the ${left} bytes left (the file system is full or failing)`), { code: "ENOSPC" });
}

/**
 * Writes all of `buf` at `position` of `fd`: a short write is followed by
 * another for the rest, until every byte is down or the file system raises
 * an error (ENOSPC when it filled: rejected with that error).
 */
export async function writeAll(fd: number, buf: Uint8Array, position: number, file = "a file"): Promise<void> {
  let done = 0;
  while (done < buf.byteLength) {
    const { bytesWritten } = await writeAt(fd, buf, done, buf.byteLength - done, position + done);
    if (bytesWritten <= 0) throw noProgress(file, position + done, buf.byteLength - done);
    done += bytesWritten;
  }
}

/** writeAll, synchronous. */
export function writeAllSync(fd: number, buf: Uint8Array, position: number, file = "a file"): void {
  let done = 0;
  while (done < buf.byteLength) {
    const n = writeSync(fd, buf, done, buf.byteLength - done, position + done);
    if (n <= 0) throw noProgress(file, position + done, buf.byteLength - done);
    done += n;
  }
}

/** Reads exactly `length` bytes at `position` of `fd` into a new buffer (a file that ends first is an error naming `what`). */
export async function readChunk(fd: number, position: number, length: number, what: string): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(length);
  let got = 0;
  while (got < length) {
    const { bytesRead } = await readAt(fd, buf, got, length - got, position + got);
    if (bytesRead === 0) throw new HearthError(`${what} ended after ${position + got} bytes, ${length - got} short of the chunk asked for`);
    got += bytesRead;
  }
  return buf;
}

/** The sum of one chunk (CRC-32). */
export function chunkSum(chunk: Uint8Array): number {
  return crc32(chunk);
}

/** The chunk sums of bytes held whole (a small part). */
export function sumsOf(data: Uint8Array): number[] {
  const sums: number[] = [];
  for (let at = 0; at < data.byteLength; at += CHUNK) sums.push(crc32(data.subarray(at, Math.min(at + CHUNK, data.byteLength))));
  return sums;
}

/** How many chunks a part of `size` bytes has (an empty part has none). */
export function chunkCount(size: number): number {
  return Math.ceil(size / CHUNK);
}

/** Which object, part and file a chunk belongs to, for the error that refuses it. */
export interface ChunkOwner {
  key: string;
  app?: string;
  part?: number;
  /** Where the bytes were read from (a file, a peer). */
  source?: string;
}

/**
 * Checks the chunk at `offset` (a multiple of CHUNK) against `sums`; throws
 * ObjectCorruptError when it differs. Parts without sums (a data dir written
 * before sums existed) are not checked.
 */
export function checkChunk(chunk: Uint8Array, offset: number, sums: readonly number[] | undefined, who: ChunkOwner): void {
  if (!sums) return;
  const i = offset / CHUNK;
  const want = sums[i];
  if (!Number.isInteger(i) || want === undefined) {
    throw new ObjectCorruptError(`part ${who.part ?? 0} of '${who.key}' has no chunk sum for offset ${offset} (${sums.length} chunk(s) recorded)`, { key: who.key, app: who.app, part: who.part ?? 0, offset });
  }
  const got = crc32(chunk);
  if (got !== want) {
    throw new ObjectCorruptError(
      `part ${who.part ?? 0} of '${who.key}' is corrupt: the ${chunk.byteLength} bytes at offset ${offset}${who.source ? ` of ${who.source}` : ""} have sum ${got.toString(16)}, ` +
        `not the ${want.toString(16)} recorded when it was written; it was refused, not served. Write the object again (put/update) to replace it`,
      { key: who.key, app: who.app, part: who.part ?? 0, offset },
    );
  }
}

/**
 * The `size` bytes of `file`, a CHUNK at a time, each checked against `sums`
 * (when given) before it is handed over; a file that ends early or holds
 * other bytes fails. Nothing is held but the chunk in hand.
 */
export async function* fileChunks(file: string, size: number, sums: readonly number[] | undefined, who: ChunkOwner): AsyncGenerator<Buffer> {
  const fh = await open(file, "r");
  try {
    for (let at = 0; at < size; at += CHUNK) {
      const chunk = await readChunk(fh.fd, at, Math.min(CHUNK, size - at), `${file} (part ${who.part ?? 0} of '${who.key}', ${size} bytes)`);
      checkChunk(chunk, at, sums, { ...who, source: who.source ?? file });
      yield chunk;
    }
  } finally {
    await fh.close();
  }
}
