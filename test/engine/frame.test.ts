// Unit tests of the engine pipe framing and tensor views (no Python).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  FrameDecoder, decodeValue, encodeFrame, encodeValue, float32Tensor, int32Tensor, toFloat32Array, toInt32Array,
  type Tensor,
} from "../../sdk/tensor/index.js";

test("frames survive arbitrary chunking and carry tensors and bytes untouched", () => {
  const payloads: Uint8Array[] = [];
  const args = encodeValue({ a: int32Tensor([1, -2, 3], [3]), b: Buffer.from("xyz"), c: [float32Tensor([0.5])], d: 7 }, payloads);
  const wire = Buffer.concat([
    ...encodeFrame({ id: 1, args }, payloads),
    ...encodeFrame({ id: 2, args: null }, []),
  ]);
  for (const step of [1, 3, 7, wire.length]) {
    const decoder = new FrameDecoder();
    const frames = [];
    for (let i = 0; i < wire.length; i += step) {
      decoder.push(wire.subarray(i, i + step));
      for (let f = decoder.next(); f; f = decoder.next()) frames.push(f);
    }
    assert.deepEqual(frames.map((f) => f.header.id), [1, 2]);
    const value = decodeValue(frames[0].header.args, frames[0].payloads) as { a: Tensor; b: Buffer; c: Tensor[]; d: number };
    assert.deepEqual([...toInt32Array(value.a)], [1, -2, 3]);
    assert.equal(value.b.toString(), "xyz");
    assert.deepEqual([...toFloat32Array(value.c[0])], [0.5]);
    assert.equal(value.d, 7);
  }
});

test("misaligned tensor bytes are copied, never aliased", () => {
  const backing = Buffer.alloc(9);
  const t = float32Tensor([1.5, -2.25]);
  backing.set(t.data, 1);
  const view = toFloat32Array({ dtype: "float32", shape: [2], data: backing.subarray(1) });
  assert.deepEqual([...view], [1.5, -2.25]);
  assert.throws(() => int32Tensor([1, 2, 3], [2, 2]), RangeError);
});
