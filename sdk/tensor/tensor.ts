/**
 * Tensors as they cross the engine pipe: a dtype, a shape and the raw
 * little-endian row-major bytes. Helpers build them from typed arrays and read
 * them back as typed arrays (copying only when the bytes are misaligned).
 */

/** Element types the engine accepts and returns. `bfloat16` is read as raw uint16 bits. */
export type DType = "float32" | "float16" | "bfloat16" | "float64" | "int64" | "int32" | "int16" | "int8" | "uint8" | "bool";

/** A tensor on the wire. */
export interface Tensor {
  dtype: DType;
  shape: number[];
  data: Uint8Array;
}

const ITEM_SIZE: Record<DType, number> = {
  float32: 4, float16: 2, bfloat16: 2, float64: 8, int64: 8, int32: 4, int16: 2, int8: 1, uint8: 1, bool: 1,
};

/** Bytes per element of a dtype. */
export function itemSize(dtype: DType): number {
  return ITEM_SIZE[dtype];
}

/** True for a dtype name the engine knows. */
export function isDType(value: unknown): value is DType {
  return typeof value === "string" && Object.hasOwn(ITEM_SIZE, value);
}

/** True for a `{dtype, shape, data}` object. */
export function isTensor(value: unknown): value is Tensor {
  if (value === null || typeof value !== "object") return false;
  const t = value as Partial<Tensor>;
  return typeof t.dtype === "string" && Array.isArray(t.shape) && t.data instanceof Uint8Array;
}

function bytesOf(view: ArrayBufferView): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

function checkShape(length: number, shape: number[]): number[] {
  const numel = shape.reduce((a, b) => a * b, 1);
  if (numel !== length) throw new RangeError(`shape [${shape.join(", ")}] needs ${numel} elements, got ${length}`);
  return shape;
}

/** An int32 tensor (default shape: 1-D). */
export function int32Tensor(values: Int32Array | readonly number[], shape?: number[]): Tensor {
  const arr = values instanceof Int32Array ? values : Int32Array.from(values);
  return { dtype: "int32", shape: checkShape(arr.length, shape ?? [arr.length]), data: bytesOf(arr) };
}

/** A float32 tensor (default shape: 1-D). */
export function float32Tensor(values: Float32Array | readonly number[], shape?: number[]): Tensor {
  const arr = values instanceof Float32Array ? values : Float32Array.from(values);
  return { dtype: "float32", shape: checkShape(arr.length, shape ?? [arr.length]), data: bytesOf(arr) };
}

/** A uint8 tensor, e.g. a 0/1 mask (default shape: 1-D). */
export function uint8Tensor(values: Uint8Array | readonly number[], shape?: number[]): Tensor {
  const arr = values instanceof Uint8Array ? values : Uint8Array.from(values);
  return { dtype: "uint8", shape: checkShape(arr.length, shape ?? [arr.length]), data: arr };
}

function aligned(t: Tensor, size: number): ArrayBuffer {
  if (t.data.byteOffset % size === 0) return t.data.buffer as ArrayBuffer;
  const copy = new Uint8Array(t.data.byteLength); // Buffer#slice would alias, so copy explicitly
  copy.set(t.data);
  return copy.buffer;
}

function offset(t: Tensor, size: number): number {
  return t.data.byteOffset % size === 0 ? t.data.byteOffset : 0;
}

/** The elements of an int32 tensor. */
export function toInt32Array(t: Tensor): Int32Array {
  if (t.dtype !== "int32") throw new TypeError(`expected int32, got ${t.dtype}`);
  return new Int32Array(aligned(t, 4), offset(t, 4), t.data.byteLength / 4);
}

/** The elements of a float32 tensor. */
export function toFloat32Array(t: Tensor): Float32Array {
  if (t.dtype !== "float32") throw new TypeError(`expected float32, got ${t.dtype}`);
  return new Float32Array(aligned(t, 4), offset(t, 4), t.data.byteLength / 4);
}
