/**
 * An upload's bookkeeping on the object service: a write transfer, its
 * parts' files (made as each part's first chunk arrives) and which chunks
 * arrived, so a commit can say exactly what is missing.
 */
import { openSync } from "node:fs";
import { CHUNK } from "../sdk/cache/transfer.js";
import type { DType, ValueKind } from "../sdk/cache/values.js";
import { ProtocolError } from "../sdk/wire/errors.js";
import { storageError, type ObjectStore, type WriteOp } from "./head/object-store.js";

/** One part of an upload: the file its chunks go to. */
export interface UploadPart {
  file: string;
  fd: number;
  /** Length of each chunk received, by offset. */
  chunks: Map<number, number>;
  /** The sum of each chunk received, by offset: the part's sums once it is whole. */
  sums: Map<number, number>;
  /** Set when the uploader said the part is whole (`obj-seal`): nodes may copy it before the commit. */
  sealed?: { size: number; sums: number[] };
}

export interface WriteTransfer {
  /** The app namespace that opened it: only that app's peers may add to, commit or see it. */
  ns: string;
  op: WriteOp;
  key: string;
  kind: ValueKind;
  dtype?: DType;
  ifVersion?: number;
  pin?: boolean;
  scratch?: boolean;
  /** The declared size of a one-part upload; undefined for streams, whose sizes the commit names. */
  size?: number;
  /** Its parts by index, made as their first chunk arrives (a base may have many: a publication's shards). */
  parts: Map<number, UploadPart>;
  /** Chunk writes still reaching their files. */
  writing: Set<Promise<unknown>>;
  lastActive: number;
  /** The agent whose executor uploads it (its node keeps the files: it copies nothing before the commit). */
  origin?: string;
  /** Nodes were told of a sealed part: they are told when it commits nowhere (dropped). */
  announced?: boolean;
}

/** Parts one upload may have at most. */
export const MAX_UPLOAD_PARTS = 4096;

/** Part `index` of upload `t`: its file, opened on its first chunk. */
export function openUploadPart(store: ObjectStore, t: WriteTransfer, index: number): UploadPart {
  const known = t.parts.get(index);
  if (known) return known;
  if (!Number.isInteger(index) || index < 0 || index >= MAX_UPLOAD_PARTS || (t.op === "patch" && index > 0)) {
    throw new ProtocolError(`obj-chunk: part ${index} is out of range (a patch has one part, a base at most ${MAX_UPLOAD_PARTS})`);
  }
  const file = store.receivingFile(t.key);
  let fd: number;
  try {
    fd = openSync(file, "w", 0o600);
  } catch (err) {
    throw storageError(t.op, t.key, err, "");
  }
  const part = { file, fd, chunks: new Map<number, number>(), sums: new Map<number, number>() };
  t.parts.set(index, part);
  return part;
}

/** Bytes of `t` received so far. */
export function receivedBytes(t: WriteTransfer): number {
  let n = 0;
  for (const p of t.parts.values()) for (const l of p.chunks.values()) n += l;
  return n;
}

/** What is missing for chunks to cover `size` bytes exactly (full CHUNKs, the last one shorter), or "" when nothing is. */
export function missingChunks(chunks: Map<number, number>, size: number): string {
  let missing = 0;
  for (let at = 0; at < size; at += CHUNK) {
    const want = Math.min(CHUNK, size - at);
    if (chunks.get(at) !== want) missing++;
  }
  for (const at of chunks.keys()) if (at >= size && size > 0) return `a chunk at ${at} lies past the end`;
  return missing > 0 ? `${missing} chunk(s) missing` : "";
}
