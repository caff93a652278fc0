/**
 * Search-R1 end to end on real processes with the tiny model: a short
 * bootstrap, three GRPO steps, metrics.jsonl fields, rollout and trainer
 * weights bit-identical after the steps on every member; a resumed run and a
 * reattaching second driver process that continue exactly (trainer weights
 * and AdamW moments); the live agreement checks; and a real run's report
 * drawn in headless Chromium (its KL, sync and bytes rows hold numbers and
 * every chart's SVG has a size).
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import type { RunEvent } from "../../sdk/rl/run/events.js";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { type RunOptions, type StepMetrics } from "../../sdk/rl/run/run.js";
import { finishSession } from "../../sdk/rl/report/finish.js";
import { DIST, startCluster, type TestCluster } from "../helpers/cluster.js";
import { REPO_ROOT } from "../kernel/bridge.js";
import { assertDrawn } from "../kernel/notebook-rig.js";
import { launchChromium } from "../kernel/notebook-server.js";
import { CHROMIUM } from "../kernel/render.js";

// Only inside page callbacks, which run in the page.
declare const document: any;
import { lengthParity, smallRun } from "./small-run.js";

const exec = promisify(execFile);
const DRIVER = path.join(DIST, "test/fixtures/sr1-driver.js");

let cluster: TestCluster;
const home = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-home-"));
const outA = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-a-"));

before(async () => {
  process.env.HEARTH_HOME = home; // the bootstrap cache lives here
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

function options(out: string, extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return smallRun(cluster.endpoint, `e2e-${path.basename(out)}`, out, { steps: 3, ...extra });
}

test("three steps write every metrics field, emit typed progress, and rollouts end bit-identical to the trainers", async () => {
  const events: RunEvent[] = [];
  const run = await SearchR1Run.create(options(outA, { onEvent: (e) => events.push(e) }));
  try {
    const results: StepMetrics[] = [];
    for (let i = 0; i < 3; i++) results.push((await run.step()).metrics);
    const kinds = events.map((e) => e.type);
    assert.deepEqual(kinds.slice(0, 2), ["task", "executors"]);
    const warm = events.filter((e): e is Extract<RunEvent, { type: "warmstart" }> => e.type === "warmstart");
    assert.ok(warm.length === 4 || (warm.length === 1 && warm[0]!.cached), "the warm start reports each of its 4 steps (or that it was cached)");
    assert.equal(kinds.filter((k) => k === "published").length, 1);
    assert.deepEqual(kinds.slice(kinds.indexOf("published") + 1), ["sync", "step", "sync", "step", "sync", "step"]);
    const syncs = events.filter((e): e is Extract<RunEvent, { type: "sync" }> => e.type === "sync");
    assert.ok(syncs[0]!.bytes > 0 && syncs[0]!.executors === 2, "step 1: both rollouts fetched the first publication");
    const lines = readFileSync(path.join(outA, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as StepMetrics);
    assert.deepEqual(lines.map((m) => m.step), [1, 2, 3]);
    for (const m of lines) {
      for (const k of ["reward_mean", "em", "searches_per_sample", "groups_kept", "groups_dropped", "samples_trained", "tokens", "rollout_s", "update_s", "publish_bytes", "step_s"] as const) {
        assert.equal(typeof m[k], "number", `metrics.jsonl has ${k}`);
        assert.ok(Number.isFinite(m[k]));
      }
      assert.equal(m.groups_kept + m.groups_dropped, 4);
      assert.ok(m.tokens > 0);
    }
    // Make sure every rollout executor has synced to the latest publication, then compare policies.
    await run.evaluate();
    const d = await run.digests();
    assert.deepEqual(d.trainers.map((t) => t.rank), [0, 1], "every trainer rank answered");
    assert.equal(d.trainers[1]!.digest, d.trainers[0]!.digest, "trainer ranks agree");
    assert.equal(d.rollouts.length, 2, "every rollout executor answered, each addressed by id");
    assert.equal(new Set(d.rollouts.map((r) => r.executorId)).size, 2);
    for (const r of d.rollouts) assert.equal(r.digest, d.trainers[0]!.digest, `rollout ${r.executorId} holds exactly the trainers' bf16 weights`);
    const ckpt = JSON.parse(readFileSync(path.join(outA, "checkpoint.json"), "utf8"));
    assert.equal(ckpt.step, 3);
    assert.match(ckpt.weights.key, /weights$/);
    await run.saveCheckpoint();
  } finally {
    await run.close();
  }
});

/** Exact trainer state (fp32 master + AdamW moments) and policy digests of every rank after `steps` steps of an uninterrupted run. */
async function straight(name: string, steps: number) {
  const out = mkdtempSync(path.join(os.tmpdir(), `hearth-sr1-${name}-`));
  const run = await SearchR1Run.create(options(out, { name }));
  run.setReward(lengthParity);
  try {
    for (let i = 0; i < steps; i++) assert.ok((await run.step()).metrics.samples_trained > 0, "the step trained");
    return { states: await run.trainerGang.broadcast("stateDigest", [[], []]), digests: await run.digests() };
  } finally {
    await run.close();
  }
}

test("resume from a checkpoint is exact: after resuming at step 2, step 3's trainer weights AND AdamW moments equal an uninterrupted run's", async () => {
  const expected = await straight("resume-straight", 3);
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-b-"));
  const first = await SearchR1Run.create(options(out, { name: "resume-first" }));
  first.setReward(lengthParity);
  try {
    await first.step();
    await first.step();
    await first.saveCheckpoint();
  } finally {
    await first.close();
  }
  const resumed = await SearchR1Run.create(options(out, { name: "resume-second", resume: path.join(out, "checkpoint") }));
  resumed.setReward(lengthParity);
  try {
    assert.equal(resumed.stepsDone, 2);
    assert.deepEqual(resumed.history.map((m) => m.step), [1, 2], "the history came back with the checkpoint");
    assert.equal((await resumed.step()).metrics.step, 3);
    const states = await resumed.trainerGang.broadcast("stateDigest", [[], []]);
    for (const rank of [0, 1]) {
      assert.equal(states[rank]!.steps, 3, `rank ${rank} took 3 optimizer steps in all`);
      assert.equal(states[rank]!.weights, expected.states[rank]!.weights, `rank ${rank}: fp32 master weights equal the uninterrupted run's`);
      assert.equal(states[rank]!.moments, expected.states[rank]!.moments, `rank ${rank}: AdamW moments equal the uninterrupted run's`);
    }
  } finally {
    await resumed.close();
  }
});

test("a second driver process reattaches to the run: it finds step 3 and its history, and its step 4 equals an uninterrupted run's", async () => {
  const expected = await straight("reattach-straight", 4);
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-r-"));
  const opts = { ...options(out, { name: "reattach" }), log: undefined };
  const driver = async (steps: number, end: string) => {
    const { stdout } = await exec(process.execPath, [DRIVER, JSON.stringify({ options: opts, steps, end, reward: "length-parity" })], { env: process.env });
    return JSON.parse(stdout.trim().split("\n").at(-1)!) as { found: number; history: number[]; done: number; states: Array<{ weights: string; moments: string; steps: number }>; digests: Awaited<ReturnType<SearchR1Run["digests"]>>; log: string[] };
  };
  const a = await driver(3, "disconnect");
  assert.equal(a.found, 0);
  assert.equal(a.done, 3);
  const b = await driver(1, "close");
  assert.equal(b.found, 3, "B finds the run at step 3");
  assert.deepEqual(b.history, [1, 2, 3], "and its metrics history");
  assert.match(b.log.join("\n"), /reattached to run 'reattach' at step 3/);
  assert.ok(!b.log.some((l) => l.startsWith("bootstrap")), "nothing was re-initialised (no warm start)");
  assert.equal(b.done, 4);
  for (const rank of [0, 1]) {
    assert.equal(b.states[rank]!.steps, 4);
    assert.equal(b.states[rank]!.weights, expected.states[rank]!.weights, `rank ${rank}: weights after step 4 equal the uninterrupted run's`);
    assert.equal(b.states[rank]!.moments, expected.states[rank]!.moments, `rank ${rank}: AdamW moments too`);
  }
  for (const r of b.digests.rollouts) assert.equal(r.digest, expected.digests.trainers[0]!.digest, `rollout ${r.executorId} holds step 4's policy`);
  const metrics = readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => (JSON.parse(l) as StepMetrics).step);
  assert.deepEqual(metrics, [1, 2, 3, 4], "both drivers appended to one metrics.jsonl");
});

test("the live agreement check: logprob gap, KL, ratio, clip fraction, entropy, loss and grad norm per step; a rollout that skipped a patch makes it fire", async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-c-"));
  const lines: string[] = [];
  const run = await SearchR1Run.create(options(out, { lr: 1e-2, logprobGapWarn: 0.01, log: (l) => lines.push(l) }));
  try {
    run.setReward(lengthParity);
    const first = (await run.step()).metrics;
    assert.ok(first.samples_trained > 0);
    for (const k of ["logprob_gap", "logprob_gap_max", "kl", "ratio_mean", "ratio_max", "clip_frac", "entropy", "loss", "grad_norm"] as const) {
      assert.equal(typeof first[k], "number", `metrics has ${k}`);
      assert.ok(Number.isFinite(first[k]), `${k} is finite`);
    }
    const written = JSON.parse(readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n")[0]!) as StepMetrics;
    assert.equal(written.logprob_gap, first.logprob_gap, "the checks reach metrics.jsonl");
    // In sync the gap is the bf16 rounding of the published weights against the trainers' fp32 master (~1e-3 here).
    assert.ok(first.logprob_gap! < 0.01, `in sync, sampler and trainer agree (gap ${first.logprob_gap})`);
    assert.ok(Math.abs(first.ratio_mean! - 1) < 1e-3, "ratio ~1 on the first epoch");
    assert.ok(!lines.some((l) => l.startsWith("warning:")), "no warning while in sync");
    const [stale] = await run.rolloutPool.members();
    await run.rolloutPool.callMember(stale!.executorId, "skipSyncs", 1);
    const second = (await run.step()).metrics;
    console.log(`# logprob gap in sync ${first.logprob_gap}, with one rollout a patch behind ${second.logprob_gap}`);
    assert.ok(second.logprob_gap! > 0.01 && second.logprob_gap! > 5 * first.logprob_gap!, `a stale rollout widens the gap (${first.logprob_gap} → ${second.logprob_gap})`);
    assert.match(lines.join("\n"), /warning: step 2: the sampler's logprobs differ from the trainer's/);
  } finally {
    await run.close();
  }
});

test("same seed, same run: identical metrics and weights, with a CPU hog beside one of the two runs", async () => {
  const runOnce = async (name: string, hog: boolean, promptsPerTask: number) => {
    const out = mkdtempSync(path.join(os.tmpdir(), `hearth-sr1-${name}-`));
    // Sample seeds come from (run seed, step, prompt, sample): the executor that runs a call
    // (which varies with the load) must not change what it samples.
    const run = await SearchR1Run.create(options(out, { name, promptsPerTask }));
    run.setReward(lengthParity);
    const busy = hog ? spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }) : undefined;
    try {
      for (let i = 0; i < 2; i++) await run.step();
      const metrics = readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => {
        const m = JSON.parse(l) as Record<string, unknown>;
        for (const k of Object.keys(m)) if (k.endsWith("_s") || k.endsWith("_util")) delete m[k]; // wall-clock times and shares of them
        return m;
      });
      return { metrics, states: await run.trainerGang.broadcast("stateDigest", [[], []]) };
    } finally {
      busy?.kill("SIGKILL");
      await run.close();
    }
  };
  const a = await runOnce("same-a", false, 1);
  const b = await runOnce("same-b", true, 1);
  assert.ok((a.metrics[0]!.samples_trained as number) > 0, "the steps trained");
  assert.deepEqual(b.metrics, a.metrics, "metrics.jsonl is identical but for wall-clock times");
  assert.deepEqual(b.states.map((s) => [s.weights, s.moments]), a.states.map((s) => [s.weights, s.moments]), "and so are the trainers' exact states");
});

test("a real run's report in headless Chromium: the KL, sync and bytes rows hold numbers, and every chart's SVG has a size", { skip: existsSync(CHROMIUM) ? false : `no ${CHROMIUM}` }, async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-report-"));
  const run = await SearchR1Run.create(options(out, { name: "e2e-report" }));
  run.setReward(lengthParity);
  let report: string;
  try {
    const t0 = performance.now();
    const first = await run.evaluate();
    for (let i = 0; i < 2; i++) assert.ok((await run.step()).metrics.samples_trained > 0, "the step trained (so KL and the gap are measured)");
    report = (await finishSession(run, { t0, startEval: { step: 0, em: first.em, calls: first.callsPerSample }, setupSeconds: 0, before: 0 })).report;
  } finally {
    await run.close();
  }
  const browser = await launchChromium();
  try {
    const page = await browser.context.newPage();
    await page.goto(`file://${report}`);
    // A row's cells as the page shows them, by its header cell, in a section.
    const row = (section: string, name: string): Promise<string[]> =>
      page.evaluate(([sec, n]) => {
        const tr = Array.from(document.querySelectorAll(`#${sec} tr`)).find((r: any) => r.querySelector("th")?.innerText.trim() === n) as any;
        return tr ? Array.from(tr.querySelectorAll("td")).map((td: any) => (td.innerText as string).trim()) : [];
      }, [section, name] as const);
    const number = /^-?\d+(\.\d+)?(e-?\d+)?$/;
    const kl = await row("agreement", "KL to the reference");
    assert.ok(kl.slice(0, 4).every((c) => number.test(c)), `KL: mean, median, last, max are numbers: ${JSON.stringify(kl)}`);
    const gap = await row("agreement", "logprob gap (mean)");
    assert.ok(gap.slice(0, 4).every((c) => number.test(c)), `logprob gap: ${JSON.stringify(gap)}`);
    const sync = await row("phases", "sync");
    assert.ok(sync.slice(0, 3).every((c) => number.test(c)), `sync seconds: ${JSON.stringify(sync)}`);
    for (const name of ["published", "fetched"]) {
      const bytes = await row("weights", name);
      assert.ok(bytes.length >= 4 && bytes.slice(0, 4).every((c) => /^\d+(\.\d+)? (B|KiB|MiB|GiB)$/.test(c)), `${name} bytes: ${JSON.stringify(bytes)}`);
      assert.ok(!/^0 B$/.test(bytes[3]!), `${name}: some bytes in all (${bytes[3]})`);
    }
    const boxes = await page.evaluate(() => Array.from(document.querySelectorAll("figure")).map((f: any) => {
      const svg = f.querySelector("svg");
      const b = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
      return { id: f.id, width: b.width, height: b.height, series: f.querySelectorAll("path.series").length };
    }));
    assert.ok(boxes.length >= 8, `the report's charts: ${JSON.stringify(boxes)}`);
    for (const b of boxes) assert.ok(b.width > 100 && b.height > 50, `${b.id}'s SVG has a size: ${JSON.stringify(b)}`);
    for (const id of ["fig-kl", "fig-bytes", "fig-phases"]) assert.ok(boxes.find((b) => b.id === id)!.series >= 1, `${id} draws its lines`);
    const dir = path.join(REPO_ROOT, "test-output", "searchr1");
    mkdirSync(dir, { recursive: true });
    const png = path.join(dir, "report-real-run.png");
    await page.screenshot({ path: png, fullPage: true });
    assertDrawn(png);
  } finally {
    await browser.close();
  }
});
