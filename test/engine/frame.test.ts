// Unit tests of the engine pipe framing and tensor views (no Python), including frames whose sizes lie.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  EngineError, FrameDecoder, byteLevelVocab, decodeValue, encodeFrame, encodeValue, float32Tensor, int32Tensor, toFloat32Array, toInt32Array,
  type Tensor,
} from "../../sdk/tensor/index.js";
import { MAX_PAYLOAD_BYTES } from "../../sdk/tensor/frame.js";

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

/** One frame's bytes with a header written as given (sizes included), then `raw` as its payload bytes. */
function rawFrame(header: Record<string, unknown>, raw: Buffer = Buffer.alloc(0)): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.byteLength, 0);
  return Buffer.concat([len, json, raw]);
}

function protocolError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof EngineError, String(e));
    assert.equal(e.code, "protocol");
    assert.match(e.message, pattern);
    return true;
  });
}

test("a frame that announces 1 TB of payload fails at once, naming the size and the limit (it does not wait for the bytes)", () => {
  const decoder = new FrameDecoder();
  decoder.push(rawFrame({ id: 1, ok: true, result: { $bytes: 0 }, sizes: [1e12] }, Buffer.alloc(16)));
  protocolError(() => decoder.next(), new RegExp(`announces 1000000000000 payload bytes .*over the limit of ${MAX_PAYLOAD_BYTES}`));
  const small = new FrameDecoder({ maxPayloadBytes: 1000 });
  small.push(rawFrame({ id: 2, sizes: [600, 600] }));
  protocolError(() => small.next(), /announces 1200 payload bytes \(payload 1 alone 600\), over the limit of 1000/);
});

test("a negative, fractional or non-numeric size is refused; it never moves the parser back into consumed bytes", () => {
  const decoder = new FrameDecoder();
  decoder.push(Buffer.concat([rawFrame({ id: 1, ok: true, result: { $bytes: 0 }, sizes: [-8] }, Buffer.from("12345678")), rawFrame({ id: 2, sizes: [] })]));
  protocolError(() => decoder.next(), /payload 0 of a frame has size -8; a size is a non-negative integer/);
  for (const sizes of [[1.5], ["8"], [null], 8, { 0: 8 }]) {
    const d = new FrameDecoder();
    d.push(rawFrame({ id: 3, sizes }, Buffer.alloc(8)));
    protocolError(() => d.next(), /size|sizes/);
  }
  const header = new FrameDecoder({ maxHeaderBytes: 16 });
  header.push(rawFrame({ id: 4, padding: "x".repeat(32) }));
  protocolError(() => header.next(), /frame header of \d+ bytes is over the limit of 16/);
  const notJson = new FrameDecoder();
  notJson.push(Buffer.concat([Buffer.from([3, 0, 0, 0]), Buffer.from("{x}")]));
  protocolError(() => notJson.next(), /not JSON/);
});

test("payload references must name a payload of the frame, and a tensor's shape and dtype must match its bytes", () => {
  const payloads = [Buffer.alloc(12)];
  protocolError(() => decodeValue({ $bytes: 1 }, payloads), /names payload 1, but the frame has 1/);
  protocolError(() => decodeValue({ $tensor: -1, dtype: "int32", shape: [3] }, payloads), /names payload -1/);
  protocolError(() => decodeValue({ $tensor: 0, dtype: "int32", shape: [4] }, payloads), /int32 tensor of shape \[4\] needs 16 bytes; its payload has 12/);
  protocolError(() => decodeValue({ $tensor: 0, dtype: "complex", shape: [3] }, payloads), /dtype "complex"/);
  protocolError(() => decodeValue({ $tensor: 0, dtype: "int32", shape: [-3] }, payloads), /shape \[-3\]/);
  assert.deepEqual([...toInt32Array(decodeValue({ $tensor: 0, dtype: "int32", shape: [3, 1] }, payloads) as Tensor)], [0, 0, 0]);
});
