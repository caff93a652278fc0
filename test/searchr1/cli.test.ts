/**
 * `hearth train search-r1` as a user runs it, on real processes: bad flags
 * are refused before any service starts, `--eval-every` evaluates on its
 * steps, a re-run with other flags replaces the services a killed run left
 * warm, and Ctrl-C stops after the current step with metrics, checkpoint and
 * report written and the app released.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { CLI, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";

const exec = promisify(execFile);
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-cli-"));
let cluster: TestCluster;

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});
after(async () => {
  await cluster?.stop();
});

/** Small settings for the tiny preset; `extra` flags are appended (later flags win). */
function flags(name: string, extra: string[] = []): string[] {
  return ["train", "search-r1", "--head", cluster.endpoint, "--name", name, "--out", path.join(work, name), "--steps", "2", "--prompts-per-step", "2",
    "--prompts-per-task", "1", "--group-size", "2", "--eval-size", "4", "--eval-every", "0", "--bootstrap-steps", "2", ...extra];
}

async function apps(): Promise<string[]> {
  return ((await cluster.status()).apps as Array<{ name: string }>).map((a) => a.name);
}

async function fails(name: string, extra: string[], pattern: RegExp): Promise<void> {
  const err = await exec(process.execPath, [CLI, ...flags(name, extra)]).then(
    () => assert.fail(`${extra.join(" ")} should have failed`),
    (e: { code: number; stderr: string }) => e,
  );
  assert.equal(err.code, 1);
  assert.match(err.stderr, pattern);
  assert.ok(!(await apps()).includes(name), `${extra.join(" ")}: no app was created`);
}

test("bad flags are refused before any service starts, each with what was wrong", async () => {
  await fails("f1", ["--steps", "1.5"], /--steps must be a whole number ≥ 0; got 1\.5/);
  await fails("f2", ["--group-size=-2"], /--group-size must be a whole number ≥ 1; got -2/);
  await fails("f3", ["--lr", "fast"], /--lr must be a number; got 'fast'/);
  await fails("f4", ["--bogus", "1"], /Unknown option '--bogus'[\s\S]*usage: hearth train search-r1/);
  await fails("f5", ["--rollout-dtype", "fp8"], /--rollout-dtype must be one of auto, bfloat16, float32; got fp8/);
  const file = path.join(work, "a-file");
  writeFileSync(file, "x");
  await fails("f6", ["--out", path.join(file, "sub")], /--out .*a-file\/sub: cannot write results there/);
});

test("--eval-every evaluates on its steps; the report and checkpoint are written; the app is released", async () => {
  const { stdout } = await exec(process.execPath, [CLI, ...flags("ev", ["--eval-every", "1"])]);
  const metrics = readFileSync(path.join(work, "ev", "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number; eval_em?: number; publish_s?: number; sync_s?: number });
  assert.deepEqual(metrics.map((m) => m.step), [1, 2]);
  for (const m of metrics) {
    assert.equal(typeof m.eval_em, "number", `step ${m.step} was evaluated`);
    assert.ok(m.publish_s! >= 0 && m.sync_s! >= 0, `step ${m.step} timed its publication (0 when no group was kept) and weight sync`);
  }
  assert.match(stdout, /held-out EM .* in 2 steps/);
  assert.match(stdout, /time: set-up \d+ s incl\. warm start \d+ s; RL \d+ s; total \d+ s/);
  const report = readFileSync(path.join(work, "ev", "report.html"), "utf8");
  assert.match(report, /<td class="sub">of which the warm start<\/td>[\s\S]*2 supervised steps/, "the report times the warm start apart");
  assert.match(report, /<section id="trajectory">[\s\S]*class="hearth-span hearth-prompt"[\s\S]*class="hearth-span hearth-generated"/, "the report shows a trajectory of the last step");
  assert.ok(existsSync(path.join(work, "ev", "checkpoint", "driver-state.json")));
  assert.ok(!(await apps()).includes("ev"), "the CLI released its app");
});

test("a run killed mid-way leaves its app warm; a re-run with other flags replaces those services", async () => {
  const child = spawn(process.execPath, [CLI, ...flags("rr", ["--steps", "50"])], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  await waitFor("the first step", () => (/step +1 /.test(out) ? true : undefined), 120_000);
  child.kill("SIGKILL");
  await new Promise((r) => child.once("close", r));
  assert.ok((await apps()).includes("rr"), "the killed run's app stayed warm");
  const { stdout } = await exec(process.execPath, [CLI, ...flags("rr", ["--rollouts", "1", "--trainers", "1"])]);
  assert.match(stdout, /services ready: 1 rollout executor\(s\) .* a gang of 1 trainer\(s\)/);
});

test("Ctrl-C stops after the current step: metrics, checkpoint and report are written and the app is released", async () => {
  const child = spawn(process.execPath, [CLI, ...flags("cc", ["--steps", "200"])], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const code = new Promise<number | null>((r) => child.once("close", r));
  await waitFor("the first step", () => (/step +1 /.test(out) ? true : undefined), 120_000);
  child.kill("SIGINT");
  assert.equal(await code, 130);
  assert.match(out, /interrupted: stopping after the current step/);
  const steps = readFileSync(path.join(work, "cc", "metrics.jsonl"), "utf8").trim().split("\n").length;
  assert.ok(steps >= 1 && steps < 200, `stopped early (${steps} steps)`);
  const driver = JSON.parse(readFileSync(path.join(work, "cc", "checkpoint", "driver-state.json"), "utf8")) as { step: number };
  assert.equal(driver.step, steps, "the checkpoint holds the last finished step");
  assert.ok(existsSync(path.join(work, "cc", "report.html")));
  assert.ok(!(await apps()).includes("cc"), "the app was released");
});
