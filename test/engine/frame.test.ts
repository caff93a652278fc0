// Unit tests of the engine pipe framing and tensor views (no Python).
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  FrameDecoder, byteLevelVocab, decodeValue, encodeFrame, encodeValue, float32Tensor, int32Tensor, toFloat32Array, toInt32Array,
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

test("byte-level BPE vocabularies decode to raw bytes, special tokens to their text", () => {
  // "Ġ" is GPT-2's spelling of the space byte, "Ċ" of newline; "Ã©" spells the two bytes of "é".
  const vocab = byteLevelVocab({
    model: { type: "BPE", vocab: { "</": 0, "search": 1, ">": 2, "Ġthe": 3, "Ċ": 4, "Ã©": 5 } },
    added_tokens: [{ id: 7, content: "<|im_end|>" }],
  }, 9);
  assert.equal(vocab.length, 9);
  const text = (ids: number[]): string => Buffer.concat(ids.map((i) => vocab[i])).toString("utf8");
  assert.equal(text([0, 1, 2]), "</search>");
  assert.equal(text([3, 4, 5]), " the\né");
  assert.equal(text([7]), "<|im_end|>");
  assert.equal(vocab[6].length, 0);
});
