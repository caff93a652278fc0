/**
 * Encoding of hearth messages. A message is one msgpack header frame (a map
 * with a string `t` naming its type) optionally followed by payload frames.
 * Call arguments and results travel as one msgpack payload frame that the head
 * forwards untouched, so routing never re-encodes user data.
 */
import { Packr } from "msgpackr";
import { ProtocolError } from "./errors.js";

/** Call message limit: arguments or a result above this travel by object reference. */
export const MESSAGE_LIMIT = 128 * 1024;

const packr = new Packr({ useRecords: false, moreTypes: true, encodeUndefinedAsNil: false });

/** Encodes any msgpack-able value (maps, arrays, numbers, strings, Buffers, typed arrays). */
export function encode(value: unknown): Buffer {
  return packr.pack(value);
}

/** Decodes one msgpack value; throws ProtocolError on malformed bytes. */
export function decode(bytes: Uint8Array): unknown {
  try {
    return packr.unpack(bytes instanceof Buffer ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  } catch (err) {
    throw new ProtocolError(`malformed msgpack (${bytes.byteLength} bytes): ${(err as Error).message}`);
  }
}

/** A decoded header: always an object with a string type tag `t`. */
export interface Header {
  t: string;
  [field: string]: unknown;
}

/** Decodes and checks a header frame. */
export function decodeHeader(frame: Uint8Array | undefined): Header {
  if (frame === undefined) throw new ProtocolError("empty message: expected a msgpack header frame");
  const v = decode(frame);
  if (v === null || typeof v !== "object" || Array.isArray(v) || typeof (v as Header).t !== "string") {
    throw new ProtocolError("header frame is not a map with a string field 't'");
  }
  return v as Header;
}

/** Total byte size of a message's frames. */
export function messageSize(frames: readonly Uint8Array[]): number {
  let n = 0;
  for (const f of frames) n += f.byteLength;
  return n;
}

/** Field accessors that turn a missing or mistyped field into a ProtocolError naming it. */
export function str(h: Header, field: string): string {
  const v = h[field];
  if (typeof v !== "string") throw new ProtocolError(`'${h.t}' message: field '${field}' must be a string`);
  return v;
}

export function optStr(h: Header, field: string): string | undefined {
  const v = h[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new ProtocolError(`'${h.t}' message: field '${field}' must be a string`);
  return v;
}

export function num(h: Header, field: string): number {
  const v = h[field];
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new ProtocolError(`'${h.t}' message: field '${field}' must be a finite number`);
  }
  return v;
}

export function optNum(h: Header, field: string): number | undefined {
  const v = h[field];
  if (v === undefined || v === null) return undefined;
  return num(h, field);
}

export function obj(h: Header, field: string): Record<string, unknown> {
  const v = h[field];
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new ProtocolError(`'${h.t}' message: field '${field}' must be a map`);
  }
  return v as Record<string, unknown>;
}

/** Frames of one outgoing message. */
export type Frames = Array<Buffer | Uint8Array | string>;
