// checkModelFolder: the TypeScript pre-flight check of a Hugging Face folder (headers only, no engine).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync, unlinkSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { checkModelFolder, expectedTensorShapes } from "../../sdk/tensor/index.js";

const CONFIG = {
  model_type: "qwen2", vocab_size: 256, hidden_size: 64, intermediate_size: 128, num_hidden_layers: 2,
  num_attention_heads: 4, num_key_value_heads: 2, tie_word_embeddings: true,
};

/** A safetensors file of zero-filled bf16 tensors, written by hand. */
function writeSafetensors(file: string, tensors: [string, number[]][]): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const [name, shape] of tensors) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 2;
    header[name] = { dtype: "BF16", shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(file, Buffer.concat([len, json, Buffer.alloc(offset)]));
}

/** A two-shard folder of CONFIG (edited by `change`), with tokenizer files unless told otherwise. */
function folder(change: (shapes: Map<string, number[]>, config: Record<string, unknown>) => void = () => undefined): string {
  const dir = mkdtempSync(path.join(tmpdir(), "hearth-model-check-"));
  const config: Record<string, unknown> = { ...CONFIG };
  const shapes = expectedTensorShapes(config);
  change(shapes, config);
  const entries = [...shapes];
  const half = Math.ceil(entries.length / 2);
  const shards = [entries.slice(0, half), entries.slice(half)];
  const weightMap: Record<string, string> = {};
  shards.forEach((s, i) => {
    const file = `model-0000${i + 1}-of-00002.safetensors`;
    writeSafetensors(path.join(dir, file), s);
    for (const [name] of s) weightMap[name] = file;
  });
  writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: weightMap }));
  writeFileSync(path.join(dir, "config.json"), JSON.stringify(config));
  writeFileSync(path.join(dir, "tokenizer.json"), "{}");
  writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ chat_template: "{{ x }}", eos_token: "<e>" }));
  return dir;
}

function withFolder(change: Parameters<typeof folder>[0], check: (dir: string) => void): void {
  const dir = folder(change);
  try {
    check(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("checkModelFolder: a consistent sharded folder passes and reports what it holds", () => {
  withFolder(undefined, (dir) => {
    const info = checkModelFolder(dir, { tokenizer: true });
    assert.equal(info.tensors, 2 + 2 * 12);
    assert.deepEqual(info.weightFiles, ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]);
    assert.ok(info.hasTokenizer && info.hasChatTemplate && !info.hasGenerationConfig);
    assert.ok(info.weightBytes > 256 * 64 * 2);
  });
  // A tied model may also store lm_head (HF writes one for some tied models).
  withFolder((s) => s.set("lm_head.weight", [256, 64]), (dir) => assert.equal(checkModelFolder(dir).tensors, 26));
});

test("checkModelFolder: each inconsistency is a clear error naming what is wrong", () => {
  const cases: [Parameters<typeof folder>[0], RegExp][] = [
    [(_, c) => (c.intermediate_size = 96), /shape mismatch 6: .*model\.layers\.0\.mlp\.down_proj\.weight: weights \[64, 128\] vs config \[64, 96\]/],
    [(s) => s.delete("model.layers.1.mlp.up_proj.weight"), /missing 1: model\.layers\.1\.mlp\.up_proj\.weight/],
    [(s) => s.set("model.layers.7.extra", [2]), /unexpected 1: model\.layers\.7\.extra/],
    [(_, c) => (c.num_attention_heads = 0), /num_attention_heads = 0 is out of range/],
    [(_, c) => (c.num_key_value_heads = 3), /num_key_value_heads 3 does not divide num_attention_heads 4/],
    [(_, c) => (c.vocab_size = 2_000_000), /vocab_size = 2000000 is out of range/],
    [(_, c) => (c.hidden_size = "64"), /hidden_size must be an integer/],
    [(_, c) => (c.model_type = "llama"), /model_type 'llama' is not supported/],
  ];
  for (const [change, message] of cases) withFolder(change, (dir) => assert.throws(() => checkModelFolder(dir), message));
});

test("checkModelFolder: missing files, escaping shard names and corrupt headers are refused", () => {
  withFolder(undefined, (dir) => {
    unlinkSync(path.join(dir, "tokenizer.json"));
    assert.equal(checkModelFolder(dir).hasTokenizer, false);
    assert.throws(() => checkModelFolder(dir, { tokenizer: true }), /tokenizer\.json is missing/);
    unlinkSync(path.join(dir, "model-00002-of-00002.safetensors"));
    assert.throws(() => checkModelFolder(dir), /weight file model-00002-of-00002\.safetensors .* is missing/);
  });
  withFolder(undefined, (dir) => {
    const index = path.join(dir, "model.safetensors.index.json");
    const parsed = JSON.parse(readFileSync(index, "utf8")) as { weight_map: Record<string, string> };
    for (const bad of ["../other.safetensors", "/etc/passwd", "a/../../b.safetensors"]) {
      writeFileSync(index, JSON.stringify({ weight_map: { ...parsed.weight_map, "model.norm.weight": bad } }));
      assert.throws(() => checkModelFolder(dir), /must be plain file names inside the folder/, bad);
    }
    writeFileSync(index, JSON.stringify(parsed));
    const shard = path.join(dir, "model-00001-of-00002.safetensors");
    writeFileSync(shard, readFileSync(shard).subarray(0, 40));
    assert.throws(() => checkModelFolder(dir), /corrupt or truncated/);
  });
  withFolder(undefined, (dir) => {
    unlinkSync(path.join(dir, "config.json"));
    assert.throws(() => checkModelFolder(dir), /config\.json is missing/);
  });
  assert.throws(() => checkModelFolder("/nonexistent/hearth-model"), /no such folder/);
});
