/**
 * Pipe framing shared with `cluster-agent/engine/hearth_engine/protocol.py`:
 * a u32 little-endian header length, a UTF-8 JSON header listing the byte
 * sizes of the raw payloads that follow (`sizes`), then those payloads.
 * Inside the JSON a payload is `{"$bytes": i}` or
 * `{"$tensor": i, "dtype": "int32", "shape": [..]}`; tensors are never
 * re-encoded.
 */

import { isTensor, type Tensor, type DType } from "./tensor.js";

/** A decoded frame: its JSON header and raw payloads. */
export interface Frame {
  header: Record<string, unknown>;
  payloads: Buffer[];
}

/** Largest header accepted from the engine. */
export const MAX_HEADER_BYTES = 64 * 1024 * 1024;

/** Encode a header and payloads as the buffers of one frame (write them in order). */
export function encodeFrame(header: Record<string, unknown>, payloads: Uint8Array[]): Buffer[] {
  const json = Buffer.from(JSON.stringify({ ...header, sizes: payloads.map((p) => p.byteLength) }), "utf8");
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.byteLength, 0);
  return [len, json, ...payloads.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength))];
}

/** Incremental frame parser for a byte stream (push chunks, pull whole frames). */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  /** Add bytes read from the stream. */
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.byteLength;
  }

  /** The next complete frame, or undefined until more bytes arrive. Throws on a malformed header. */
  next(): Frame | undefined {
    if (this.buffered < 4) return undefined;
    const all = this.flatten();
    const headerLen = all.readUInt32LE(0);
    if (headerLen > MAX_HEADER_BYTES) throw new Error(`frame header of ${headerLen} bytes exceeds the limit`);
    if (all.byteLength < 4 + headerLen) return undefined;
    const header = JSON.parse(all.subarray(4, 4 + headerLen).toString("utf8")) as Record<string, unknown>;
    const sizes = Array.isArray(header.sizes) ? (header.sizes as number[]) : [];
    const total = 4 + headerLen + sizes.reduce((a, b) => a + b, 0);
    if (all.byteLength < total) return undefined;
    const payloads: Buffer[] = [];
    let at = 4 + headerLen;
    for (const size of sizes) {
      payloads.push(all.subarray(at, at + size));
      at += size;
    }
    const rest = all.subarray(total);
    this.chunks = rest.byteLength ? [rest] : [];
    this.buffered = rest.byteLength;
    return { header, payloads };
  }

  private flatten(): Buffer {
    if (this.chunks.length > 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0] ?? Buffer.alloc(0);
  }
}

/** Replace tensors and byte arrays in `value` by payload references, appending to `payloads`. */
export function encodeValue(value: unknown, payloads: Uint8Array[]): unknown {
  if (isTensor(value)) {
    payloads.push(value.data);
    return { $tensor: payloads.length - 1, dtype: value.dtype, shape: value.shape };
  }
  if (value instanceof Uint8Array) {
    payloads.push(value);
    return { $bytes: payloads.length - 1 };
  }
  if (Array.isArray(value)) return value.map((v) => encodeValue(v, payloads));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = encodeValue(v, payloads);
    return out;
  }
  return value;
}

/** Replace payload references in a decoded header value by Tensors and Buffers. */
export function decodeValue(value: unknown, payloads: Buffer[]): unknown {
  if (Array.isArray(value)) return value.map((v) => decodeValue(v, payloads));
  if (value !== null && typeof value === "object") {
    const obj = value as Record<string, unknown>;
    if (typeof obj.$tensor === "number") {
      const t: Tensor = { dtype: obj.dtype as DType, shape: obj.shape as number[], data: payloads[obj.$tensor] };
      return t;
    }
    if (typeof obj.$bytes === "number") return payloads[obj.$bytes];
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(obj)) out[k] = decodeValue(v, payloads);
    return out;
  }
  return value;
}
