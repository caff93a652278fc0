/**
 * Where a read transfer's bytes come from, a chunk at a time: a stored
 * part in memory or in its file (every chunk read from a file checked
 * against the part's sums first), or, on a node cache, a part it is still
 * receiving (receiving.ts).
 */
import { closeSync, openSync } from "node:fs";
import { checkChunk, readChunk } from "../sdk/cache/file-io.js";
import { CHUNK } from "../sdk/cache/transfer.js";
import { objectIds, type ObjectStore, type StoredObject, type StoredPart } from "./head/object-store.js";

/** The bytes of one part of a read transfer, read a chunk at a time. */
export interface PartSource {
  readonly size: number;
  /** `length` bytes at `offset` (the last chunk may be shorter). Rejects when the bytes cannot be had. */
  read(offset: number, length: number): Promise<Buffer>;
  /** Frees what the source holds (a descriptor). */
  close(): void;
}

/**
 * A part in memory or in a file the store holds (the descriptor keeps it
 * readable after a replace or delete). Every chunk read from a file is
 * checked against the part's sums first: bytes that changed on disk are
 * refused (ObjectCorruptError), never served.
 */
export function storedSource(store: ObjectStore, obj: StoredObject, part: StoredPart, index = 0): PartSource {
  if (part.data) {
    const data = part.data;
    return { size: part.size, read: async (o, l) => data.subarray(o, o + l), close: () => undefined };
  }
  return checkedFileSource(store.pathOf(obj, part), part.size, part.sums, objectIds(obj.key), index);
}

/** A part's file read a chunk at a time, each chunk checked against `sums` first (the descriptor keeps it readable after a rename or delete). */
export function checkedFileSource(file: string, size: number, sums: readonly number[] | undefined, ids: { key: string; app?: string }, index: number): PartSource {
  const fd = openSync(file, "r");
  return { size, read: (o, l) => readChecked(fd, file, size, sums, o, l, ids, index), close: () => closeSync(fd) };
}

/**
 * `length` bytes at `offset` of a part's file, after the whole chunk around
 * them passed its sum (a read off the chunk grid reads its chunk whole).
 */
export async function readChecked(fd: number, file: string, size: number, sums: readonly number[] | undefined, offset: number, length: number, ids: { key: string; app?: string }, part: number): Promise<Buffer> {
  const start = offset - (offset % CHUNK);
  const whole = Math.min(CHUNK, size - start);
  const chunk = await readChunk(fd, start, whole, file);
  checkChunk(chunk, start, sums, { ...ids, part, source: file });
  return start === offset && length >= whole ? chunk : chunk.subarray(offset - start, Math.min(offset - start + length, whole));
}
