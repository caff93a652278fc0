/**
 * Pipe framing shared with `cluster-agent/engine/hearth_engine/protocol.py`:
 * a u32 little-endian header length, a UTF-8 JSON header listing the byte
 * sizes of the raw payloads that follow (`sizes`), then those payloads.
 * Inside the JSON a payload is `{"$bytes": i}` or
 * `{"$tensor": i, "dtype": "int32", "shape": [..]}`; tensors are never
 * re-encoded.
 */

import buffer from "node:buffer";
import { EngineError } from "./errors.js";
import { isDType, isTensor, itemSize, type Tensor } from "./tensor.js";

/** A decoded frame: its JSON header and raw payloads. */
export interface Frame {
  header: Record<string, unknown>;
  payloads: Buffer[];
}

/** Largest header accepted from the engine. */
export const MAX_HEADER_BYTES = 64 * 1024 * 1024;

/**
 * Largest sum of payload bytes one frame may announce by default (the
 * engine's own bound, 64 GiB). Each payload becomes its own buffer, never
 * the frame as one, so only a single payload is held to Node's Buffer limit
 * (MAX_ONE_PAYLOAD_BYTES); large data (a publication, a checkpoint) travels
 * as files whose paths the frame carries.
 */
export const MAX_PAYLOAD_BYTES = 2 ** 36;

/** Largest single payload: the largest Buffer this Node.js can allocate. */
export const MAX_ONE_PAYLOAD_BYTES = buffer.constants.MAX_LENGTH;

/** Bounds of a FrameDecoder. */
export interface FrameLimits {
  /** Largest header (bytes of JSON). Default MAX_HEADER_BYTES. */
  maxHeaderBytes: number;
  /** Largest sum of the payload sizes one frame announces. Default MAX_PAYLOAD_BYTES. */
  maxPayloadBytes: number;
}

/** Encode a header and payloads as the buffers of one frame (write them in order). */
export function encodeFrame(header: Record<string, unknown>, payloads: Uint8Array[]): Buffer[] {
  const json = Buffer.from(JSON.stringify({ ...header, sizes: payloads.map((p) => p.byteLength) }), "utf8");
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.byteLength, 0);
  return [len, json, ...payloads.map((p) => Buffer.from(p.buffer, p.byteOffset, p.byteLength))];
}

/** A frame's header, read and checked, while its payloads are still arriving. */
interface Pending {
  header: Record<string, unknown>;
  sizes: number[];
  /** Bytes of the whole frame: length prefix, header and payloads. */
  total: number;
}

/**
 * Incremental frame parser for a byte stream (push chunks, pull whole
 * frames). Sizes come from the other process and are checked before they
 * are trusted: the header length and every payload size must be
 * non-negative integers within the limits, so a frame that announces more
 * than the limit fails at once (instead of waiting for bytes that never
 * come), and a negative size cannot move the parser backwards into bytes it
 * already consumed. A violation throws EngineError `protocol`, naming the
 * size and the limit; the stream cannot be trusted after it.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private pending?: Pending;
  private readonly limits: FrameLimits;

  constructor(limits: Partial<FrameLimits> = {}) {
    this.limits = { maxHeaderBytes: MAX_HEADER_BYTES, maxPayloadBytes: MAX_PAYLOAD_BYTES, ...limits };
  }

  /** Add bytes read from the stream. */
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.byteLength;
  }

  /** The next complete frame, or undefined until more bytes arrive. Throws EngineError `protocol` on a malformed or oversized frame. */
  next(): Frame | undefined {
    this.pending ??= this.readHeader();
    const frame = this.pending;
    if (!frame || this.buffered < frame.total) return undefined;
    // Each payload is cut from the chunks when the whole frame is here: a view when it lies in one
    // chunk, else joined on its own (never the frame as one buffer).
    this.take(frame.total - frame.sizes.reduce((a, b) => a + b, 0));
    const payloads = frame.sizes.map((size) => this.take(size));
    this.pending = undefined;
    return { header: frame.header, payloads };
  }

  /** The next `n` buffered bytes, consumed: a view of one chunk, or those chunks' bytes joined. */
  private take(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0];
    if (n === 0) return Buffer.alloc(0);
    if (first && first.byteLength >= n) {
      const out = first.subarray(0, n);
      if (first.byteLength === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return out;
    }
    const out = Buffer.allocUnsafe(n);
    let at = 0;
    while (at < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.byteLength, n - at);
      c.copy(out, at, 0, k);
      at += k;
      if (k === c.byteLength) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    return out;
  }

  /** Reads and checks the next header once its bytes are here. */
  private readHeader(): Pending | undefined {
    if (this.buffered < 4) return undefined;
    const headerLen = this.peek(4).readUInt32LE(0);
    if (headerLen > this.limits.maxHeaderBytes) throw frameError(`a frame header of ${headerLen} bytes is over the limit of ${this.limits.maxHeaderBytes}`);
    if (this.buffered < 4 + headerLen) return undefined;
    let header: unknown;
    try {
      header = JSON.parse(this.peek(4 + headerLen).subarray(4).toString("utf8"));
    } catch (err) {
      throw frameError(`a frame header is not JSON: ${(err as Error).message}`);
    }
    if (header === null || typeof header !== "object" || Array.isArray(header)) throw frameError("a frame header is not a JSON object");
    const raw = (header as Record<string, unknown>).sizes ?? [];
    if (!Array.isArray(raw)) throw frameError(`a frame's sizes are not a list: ${JSON.stringify(raw).slice(0, 80)}`);
    let payloadBytes = 0;
    raw.forEach((size: unknown, i) => {
      if (typeof size !== "number" || !Number.isSafeInteger(size) || size < 0) throw frameError(`payload ${i} of a frame has size ${JSON.stringify(size)}; a size is a non-negative integer`);
      payloadBytes += size;
      if (payloadBytes > this.limits.maxPayloadBytes) {
        throw frameError(`a frame announces ${payloadBytes} payload bytes (payload ${i} alone ${size}), over the limit of ${this.limits.maxPayloadBytes}`);
      }
      if (size > MAX_ONE_PAYLOAD_BYTES) throw frameError(`payload ${i} of a frame is ${size} bytes, over the largest buffer (${MAX_ONE_PAYLOAD_BYTES}); large data travels as files (publishFiles, applyFiles)`);
    });
    return { header: header as Record<string, unknown>, sizes: raw as number[], total: 4 + headerLen + payloadBytes };
  }

  /** The first `n` buffered bytes (joins only the chunks they span). */
  private peek(n: number): Buffer {
    let joined = 0;
    let count = 0;
    while (joined < n) joined += this.chunks[count++]!.byteLength;
    if (count > 1) this.chunks.splice(0, count, Buffer.concat(this.chunks.slice(0, count)));
    return this.chunks[0]!.subarray(0, n);
  }

}

function frameError(message: string): EngineError {
  return new EngineError({ code: "protocol", message });
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

/**
 * Replace payload references in a decoded header value by Tensors and
 * Buffers. Each reference must name a payload of the frame, and a tensor's
 * dtype and shape must account for exactly its payload's bytes; otherwise
 * EngineError `protocol`.
 */
export function decodeValue(value: unknown, payloads: Buffer[]): unknown {
  if (Array.isArray(value)) return value.map((v) => decodeValue(v, payloads));
  if (value !== null && typeof value === "object") {
    const obj = value as Record<string, unknown>;
    if (obj.$tensor !== undefined) {
      const data = payloadAt(obj.$tensor, payloads, "$tensor");
      const dtype = obj.dtype;
      if (!isDType(dtype)) throw frameError(`a tensor has dtype ${JSON.stringify(dtype)?.slice(0, 40)}, which the engine protocol does not know`);
      const shape = obj.shape;
      if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && (d as number) >= 0)) throw frameError(`a tensor has shape ${JSON.stringify(shape)?.slice(0, 80)}; a shape is a list of non-negative integers`);
      const bytes = shape.reduce((n: number, d: number) => n * d, itemSize(dtype));
      if (bytes !== data.byteLength) throw frameError(`a ${dtype} tensor of shape [${shape.join(", ")}] needs ${bytes} bytes; its payload has ${data.byteLength}`);
      const t: Tensor = { dtype, shape: shape as number[], data };
      return t;
    }
    if (obj.$bytes !== undefined) return payloadAt(obj.$bytes, payloads, "$bytes");
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(obj)) out[k] = decodeValue(v, payloads);
    return out;
  }
  return value;
}

function payloadAt(index: unknown, payloads: Buffer[], what: string): Buffer {
  if (typeof index !== "number" || !Number.isInteger(index) || index < 0 || index >= payloads.length) {
    throw frameError(`a ${what} reference names payload ${JSON.stringify(index)}, but the frame has ${payloads.length}`);
  }
  return payloads[index]!;
}
