/**
 * The one place where a process makes a buffer the size of an object (or of
 * one part of it). Node caps a Buffer at `buffer.constants.MAX_LENGTH`
 * (4 GiB on Node 20) and a 3B model's bf16 base is 6.17 GB, so objects
 * travel as chunks from a file or a stream into a file or a sink; only
 * values that are small enough to be useful whole (a `get` of a trajectory
 * batch, a manifest, a 200 MB tensor) are assembled in memory, and only here.
 *
 * The ceiling is 1 GiB by default; `HEARTH_MAX_BUFFER_BYTES` (e.g. `64m`,
 * `3g`) sets it for a process and its children: a test sets it low so that
 * a 200 MiB object must stream, and every path that would have made it
 * whole fails with BufferLimitError
 * instead of passing quietly. The largest buffer made so far is reported with
 * the process's memory (status), so a test can also see what was assembled.
 */
import buffer from "node:buffer";
import { BufferLimitError } from "../errors/index.js";
import { formatBytes } from "../format.js";

/** The environment variable that sets this process's object buffer ceiling. */
export const MAX_BUFFER_ENV = "HEARTH_MAX_BUFFER_BYTES";

/**
 * The ceiling when the variable is not set: 1 GiB. Node alone would allow 4
 * GiB, but a `get` that made a 4 GiB buffer (and a decode of it, often a
 * second one) takes a node's memory by surprise; a value that large is read
 * with the streaming calls, which hold a few chunks.
 */
export const DEFAULT_MAX_BUFFER_BYTES = 1024 ** 3;

/** Parses `64m`, `1.5g`, `4096` (bytes). */
export function parseByteSize(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$/i.exec(text);
  if (!m) throw new RangeError(`'${text}' is not a size (e.g. 64m, 1.5g, 4096)`);
  const unit = { "": 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 }[m[2]!.toLowerCase() as "" | "k" | "m" | "g" | "t"];
  return Math.floor(Number(m[1]) * unit);
}

let ceiling: number | undefined;

/** This process's ceiling on one object buffer: HEARTH_MAX_BUFFER_BYTES, else DEFAULT_MAX_BUFFER_BYTES (never past the largest Buffer Node allows). */
export function maxBufferBytes(): number {
  ceiling ??= ceilingFrom(process.env[MAX_BUFFER_ENV]);
  return ceiling;
}

/** The ceiling a value of HEARTH_MAX_BUFFER_BYTES (or none) gives. */
export function ceilingFrom(env: string | undefined): number {
  return Math.min(env ? parseByteSize(env) : DEFAULT_MAX_BUFFER_BYTES, buffer.constants.MAX_LENGTH);
}

/** What this process assembled: how many object buffers, and the largest. */
export const objectBuffers = { made: 0, largest: 0 };

/**
 * Checks that an object buffer of `size` bytes may be made here, and counts
 * it; throws BufferLimitError (naming the object and what to use instead).
 */
export function admitObjectBuffer(size: number, what: { key: string; app?: string }): void {
  const limit = maxBufferBytes();
  if (size > limit) {
    throw new BufferLimitError(
      `object '${what.key}' is ${formatBytes(size)}, over this process's buffer limit of ${formatBytes(limit)}` +
        `${process.env[MAX_BUFFER_ENV] ? ` (${MAX_BUFFER_ENV})` : ` (the default; ${MAX_BUFFER_ENV} raises it up to Node's 4 GiB)`}: read it with getStream, getToFile or getParts, and write large objects with fromFile or fromStream`,
      { key: what.key, app: what.app, size, limit },
    );
  }
  objectBuffers.made++;
  if (size > objectBuffers.largest) objectBuffers.largest = size;
}

/** A new uninitialised object buffer of `size` bytes (admitObjectBuffer first). */
export function allocObjectBuffer(size: number, what: { key: string; app?: string }): Buffer {
  admitObjectBuffer(size, what);
  return Buffer.allocUnsafe(size);
}
