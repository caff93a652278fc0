/**
 * How cached values become bytes. Raw bytes travel as they are (no copy
 * through a serializer), typed arrays as their underlying bytes plus a dtype,
 * and anything else as msgpack.
 */
import { decode, encode } from "../wire/codec.js";
import { HearthError } from "../errors/index.js";

/** The three value kinds the cache stores. */
export type ValueKind = "bytes" | "typed" | "msgpack";

/** Typed-array constructors by dtype name. */
const TYPED = {
  int8: Int8Array,
  uint8c: Uint8ClampedArray,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  float32: Float32Array,
  float64: Float64Array,
  bigint64: BigInt64Array,
  biguint64: BigUint64Array,
} as const;

/** A dtype name of a typed array the cache can store. */
export type DType = keyof typeof TYPED;

/** A value as stored: its kind, dtype for typed arrays, and bytes. */
export interface EncodedValue {
  kind: ValueKind;
  dtype?: DType;
  data: Buffer;
}

/** A typed array other than plain bytes. */
export type TypedArray = InstanceType<(typeof TYPED)[DType]>;

function dtypeOf(v: ArrayBufferView): DType | undefined {
  for (const [name, Ctor] of Object.entries(TYPED)) if (v instanceof Ctor) return name as DType;
  return undefined;
}

/** Encodes a value for the cache; Buffers and Uint8Arrays are wrapped, not copied. */
export function encodeValue(value: unknown): EncodedValue {
  if (value instanceof Uint8Array && !(value instanceof Uint8ClampedArray)) {
    const data = Buffer.isBuffer(value) ? value : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
    return { kind: "bytes", data };
  }
  if (ArrayBuffer.isView(value) && !(value instanceof DataView)) {
    const dtype = dtypeOf(value);
    if (dtype) return { kind: "typed", dtype, data: Buffer.from(value.buffer, value.byteOffset, value.byteLength) };
  }
  if (value === undefined) throw new HearthError("cannot cache undefined; use null for an empty value");
  return { kind: "msgpack", data: encode(value) };
}

/** Decodes stored bytes back into the caller's value. */
export function decodeValue(kind: ValueKind, data: Buffer, dtype?: string): unknown {
  switch (kind) {
    case "bytes":
      return data;
    case "typed": {
      const Ctor = TYPED[dtype as DType];
      if (!Ctor) throw new HearthError(`unknown typed-array dtype '${String(dtype)}'`);
      // Copy into a fresh, aligned buffer: the received frame may start at any offset.
      const copy = new ArrayBuffer(data.byteLength);
      new Uint8Array(copy).set(data);
      return new Ctor(copy);
    }
    case "msgpack":
      return decode(data);
    default:
      throw new HearthError(`unknown value kind '${String(kind)}'`);
  }
}
