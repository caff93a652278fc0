/**
 * The starting policy: `hearth warmstart` makes a short one through the same
 * code as the shipped one (real head, agent, trainer executor and engine);
 * its manifest names the recipe, its hash, the seed and the command, and
 * records every file's digest; the same command makes the same weights; a
 * run starts from it with --policy; a stale or edited policy is refused before
 * any service starts, with the command that regenerates it; the policy
 * the project ships matches this code's recipe (a recipe changed without
 * regenerating fails here), and its fingerprint covers what it was trained
 * on: a changed demonstration, protocol text or task makes it stale.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { checkWarmStart, folderDigests, planHash, readManifest } from "../../sdk/rl/run/warm-start.js";
import { layerOptions } from "../../sdk/rl/run/options.js";
import { chainDemonstrations } from "../../sdk/envs/searchr1/demonstrations.js";
import type { ChainTask } from "../../sdk/envs/searchr1/tasks/chain-task.js";
import { chainPlan, chainRecipe, prepareChain, REGENERATE, shippedPolicy } from "../../sdk/envs/searchr1/recipes/chain.js";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { CLI, startCluster, type TestCluster } from "../helpers/cluster.js";

let cluster: TestCluster;
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-warmstart-"));

before(async () => {
  process.env.HEARTH_HOME = mkdtempSync(path.join(os.tmpdir(), "hearth-warmstart-home-"));
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Runs the CLI to its end (5 minutes at most); returns its exit code and output. */
function cli(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`hearth ${args.join(" ")} did not end within 5 minutes:\n${out}`));
    }, 300_000);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

const STEPS = 3;
const options = layerOptions(chainRecipe.defaults, { bootstrapSteps: STEPS });

test("hearth warmstart makes a policy folder with a manifest of its recipe, seed, command and files; the same command makes the same weights", async () => {
  const dir = path.join(work, "a");
  const made = await cli(["warmstart", "--steps", String(STEPS), "--out", dir, "--head", cluster.endpoint]);
  assert.equal(made.code, 0, made.out);
  const m = readManifest(dir);
  const plan = chainPlan(prepareChain(options), options);
  assert.equal(m.recipe, "tiny-chain");
  assert.equal(m.hash, planHash(plan), "the manifest's hash is the recipe's for these options");
  assert.equal(m.steps, STEPS);
  assert.equal(m.seed, plan.seed);
  assert.deepEqual(m.material, plan.material);
  assert.match(m.command, /^hearth warmstart --steps 3 --out /);
  assert.deepEqual(Object.keys(m.files).sort(), ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]);
  assert.deepEqual(m.files, folderDigests(dir), "every file's digest is recorded");
  assert.deepEqual(readFileSync(path.join(dir, "tokenizer.json")), Buffer.from(prepareChain(options).tokenizer.files["tokenizer.json"]!), "the task's own word-level tokenizer");
  assert.ok(Number.isFinite(m.nll) && m.nll > 0, `a mean token NLL (${m.nll})`);

  // Made again with a CPU hog beside it (issue 23: two warm starts from fresh homes parted under load): a call
  // replayed, retried or dropped under load, or a thread count that follows the load, would change the weights.
  const again = path.join(work, "b");
  const hog = spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" });
  let remade: Awaited<ReturnType<typeof cli>>;
  try {
    remade = await cli(["warmstart", "--steps", String(STEPS), "--out", again, "--head", cluster.endpoint]);
  } finally {
    hog.kill("SIGKILL");
  }
  assert.equal(remade.code, 0, remade.out);
  assert.equal(readManifest(again).nll, m.nll, "the same losses");
  assert.equal(readManifest(again).files["model.safetensors"], m.files["model.safetensors"], "same recipe, same seed, under load: the same weights, bit for bit");
});

test("a run starts from a made policy with --policy; a policy of another recipe, or an edited one, is refused before any service starts", async () => {
  const dir = path.join(work, "a");
  const out = mkdtempSync(path.join(work, "out-"));
  const lines: string[] = [];
  const run = await SearchR1Run.create({ head: cluster.endpoint, name: "warmstart-policy", out, policy: dir, bootstrapSteps: STEPS, promptsPerStep: 2, promptsPerTask: 2, groupSize: 2, evalSize: 4, evalEvery: 0, log: (l) => lines.push(l) });
  try {
    assert.ok(lines.some((l) => l.includes(`starting policy: the given ${dir}`)), lines.join("\n"));
    assert.ok(lines.some((l) => l.startsWith("trainers ready") && l.includes(`from ${dir}`)), "the trainers loaded it");
    assert.equal((await run.step()).metrics.step, 1);
  } finally {
    await run.close();
  }

  const appsBefore = await cluster.status();
  // Another recipe: the default warm-start options make another plan than the 3-step one (1,200 steps, so the
  // digest of its first batches covers 16 of them, not 3).
  await assert.rejects(
    SearchR1Run.create({ head: cluster.endpoint, name: "warmstart-stale", out, policy: dir, log: () => undefined }),
    (err: Error) => /was made by recipe tiny-chain \w+, but this code's recipe is tiny-chain \w+ \(changed: demos, steps\): it would be a stale policy\. Regenerate it with `hearth warmstart --out \S+`/.test(err.message),
  );
  const edited = path.join(work, "edited");
  await cli(["warmstart", "--steps", String(STEPS), "--out", edited, "--head", cluster.endpoint]);
  const weights = path.join(edited, "model.safetensors");
  const bytes = readFileSync(weights);
  bytes[bytes.length - 1] ^= 1;
  writeFileSync(weights, bytes);
  await assert.rejects(
    SearchR1Run.create({ head: cluster.endpoint, name: "warmstart-edited", out, policy: edited, bootstrapSteps: STEPS, log: () => undefined }),
    /model\.safetensors differs from what warmstart\.json records: regenerate it/,
  );
  const appsAfter = await cluster.status();
  const names = (s: { apps: Array<{ name: string }> }) => s.apps.map((a) => a.name).sort();
  assert.deepEqual(names(appsAfter).filter((n) => n.startsWith("warmstart-s") || n.startsWith("warmstart-e")), names(appsBefore).filter((n) => n.startsWith("warmstart-s") || n.startsWith("warmstart-e")), "no app was made for a refused run");
});

test("the shipped policy was made by this code's recipe, and its files are the ones its manifest records", () => {
  const defaults = layerOptions(chainRecipe.defaults, {});
  const m = checkWarmStart(shippedPolicy(), chainPlan(prepareChain(defaults), defaults), "npm run warmstart");
  assert.equal(m.recipe, "tiny-chain");
  assert.equal(m.steps, defaults.bootstrapSteps);
});

/** The refusal of a stale shipped policy whose fingerprint differs in exactly `changed` (the fields the error lists). */
function staleShipped(changed: string): RegExp {
  return new RegExp(`was made by recipe tiny-chain \\w+, but this code's recipe is tiny-chain \\w+ \\(changed: ${changed}\\): it would be a stale policy\\. Regenerate it with \`npm run warmstart\``);
}

test("the shipped policy's fingerprint covers what it was trained on: one changed demonstration, protocol word or training question makes it stale, refused with the command that regenerates it", () => {
  const defaults = layerOptions(chainRecipe.defaults, {});
  const task = prepareChain(defaults);
  const shipped = shippedPolicy();
  // The unchanged code is accepted (so each refusal below is the change's doing).
  checkWarmStart(shipped, chainPlan(task, defaults), REGENERATE);

  // The code that makes demonstrations changed in one token of one demonstration (the answer of the first one of step 0):
  // every declared setting is the same.
  const stepZero = 1_000_003;
  const oneChanged: typeof chainDemonstrations = (...args) => {
    const demos = chainDemonstrations(...args);
    if (args[5] !== stepZero || demos.length === 0) return demos;
    const d = demos[0]!;
    const answer = d.mask.lastIndexOf(1) - 1; // the answer word, before the closing </answer>
    assert.ok(answer > 0 && d.mask[answer] === 1, "the first demonstration ends with a trained answer");
    return [{ tokens: d.tokens.map((t, i) => (i === answer ? (t + 1) % task.tokenizer.size : t)), mask: d.mask }, ...demos.slice(1)];
  };
  const changedDemo = chainPlan(task, defaults, oneChanged);
  assert.notEqual(planHash(changedDemo), planHash(chainPlan(task, defaults)));
  assert.throws(() => checkWarmStart(shipped, changedDemo, REGENERATE), staleShipped("demos"));

  // The protocol's words: one the demonstrations never show (the search-limit message) is still in the fingerprint...
  const limit = { ...task, text: { ...task.text, limit: task.text.limit.replace("give the answer now", "answer now") } };
  assert.throws(() => checkWarmStart(shipped, chainPlan(limit, defaults), REGENERATE), staleShipped("protocol"));
  // ...and one they do show changes the demonstrations too.
  const think = { ...task, text: { ...task.text, instruction: task.text.instruction.replace("think inside", "reason inside") } };
  assert.throws(() => checkWarmStart(shipped, chainPlan(think, defaults), REGENERATE), staleShipped("protocol, demos"));

  // The task: one training question worded otherwise (chain-task.ts changed), the world and vocabulary the same.
  const world = task.extra as ChainTask;
  const last = world.train.length - 1;
  const reworded = { ...task, extra: { ...world, train: world.train.map((q, i) => (i === last ? { ...q, question: q.question.replace("what is", "what was") } : q)) } };
  assert.throws(() => checkWarmStart(shipped, chainPlan(reworded, defaults), REGENERATE), /\(changed: [^)]*\btask\b[^)]*\): it would be a stale policy\. Regenerate it with `npm run warmstart`/);
});
