/**
 * `hearth train search-r1` as a user runs it, on real processes: bad flags
 * are refused before any service starts, `--eval-every` evaluates on its
 * steps, and one sequence as a user meets it: a run killed mid-way leaves its
 * services warm, a re-run with other flags replaces them (members, resources
 * and setup read back from the head and the cache), and Ctrl-C stops that
 * re-run after its step with metrics, checkpoint and report written and the
 * app released.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { connect } from "../../sdk/connect.js";
import type { RolloutSetup } from "../../sdk/rl/services/rollout-service.js";
import { rolloutSetupKey } from "../../sdk/rl/state/run-objects.js";
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
  // The head counts every app it ever created: a refusal that opened (and closed) an app first would move the count.
  const created = (await cluster.status()).head.appsCreated as number;
  const err = await exec(process.execPath, [CLI, ...flags(name, extra)]).then(
    () => assert.fail(`${extra.join(" ")} should have failed`),
    (e: { code: number; stderr: string }) => e,
  );
  assert.equal(err.code, 1);
  assert.match(err.stderr, pattern);
  assert.equal((await cluster.status()).head.appsCreated, created, `${extra.join(" ")}: no app was ever created`);
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

interface ServiceState {
  name: string;
  kind: string;
  resreq: string;
  executors: Array<{ id: string; state: string; rank: number | null }>;
}

/** The services of app `name` as the head's status shows them, with their live executors. */
async function services(name: string): Promise<Map<string, ServiceState>> {
  const app = ((await cluster.status()).apps as Array<{ name: string; services: ServiceState[] }>).find((a) => a.name === name);
  assert.ok(app, `app ${name} exists`);
  return new Map(app.services.map((s) => [s.kind, { ...s, executors: s.executors.filter((e) => e.state !== "dead") }]));
}

/** Starts the CLI with `args`; resolves `stepped` once it printed its first step. */
function startCli(args: string[]): { child: ReturnType<typeof spawn>; out: () => string; code: Promise<number | null>; stepped: Promise<unknown> } {
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  child.stderr!.on("data", (d) => (out += d));
  const code = new Promise<number | null>((r) => child.once("close", r));
  const stepped = waitFor("the first step", () => (/step +1 /.test(out) ? true : undefined), 120_000);
  return { child, out: () => out, code, stepped };
}

test("killed mid-way, then re-run with other flags, then Ctrl-C: the warm app's services are replaced as flagged, and the re-run stops after its step with everything written", async () => {
  // 1. A run killed mid-way leaves its app and services warm.
  const first = startCli(flags("rr", ["--steps", "50"]));
  await first.stepped;
  const before = await services("rr");
  assert.equal(before.get("pool")!.executors.length, 2, "the recipe's 2 rollout executors");
  assert.deepEqual(before.get("gang")!.executors.map((e) => e.rank).sort(), [0, 1], "a gang of 2 trainers");
  first.child.kill("SIGKILL");
  await first.code;
  assert.ok((await apps()).includes("rr"), "the killed run's app stayed warm");

  // 2. The re-run with other flags replaces those services: members, resources and the rollouts' setup are the new flags'.
  const second = startCli(flags("rr", ["--steps", "200", "--rollouts", "1", "--trainers", "1", "--rollout-resreq", "cpu=0.5", "--rollout-dtype", "bfloat16"]));
  await second.stepped;
  const after = await services("rr");
  const pool = after.get("pool")!;
  const gang = after.get("gang")!;
  assert.equal(pool.executors.length, 1, "one rollout executor");
  assert.match(pool.resreq, /^cpu=0\.5\b/, "the rollouts' new resources");
  assert.deepEqual(gang.executors.map((e) => e.rank), [0], "a gang of one trainer");
  const old = new Set([...before.values()].flatMap((s) => s.executors.map((e) => e.id)));
  for (const e of [...pool.executors, ...gang.executors]) assert.ok(!old.has(e.id), `${e.id} is a new executor, not one of the killed run's`);
  const driver = await connect({ name: "rr", head: cluster.endpoint });
  try {
    const setup = await driver.objects.get<RolloutSetup>(rolloutSetupKey("rr"));
    assert.equal(setup.dtype, "bfloat16", "the rollouts' setup carries the re-run's --rollout-dtype");
  } finally {
    await driver.disconnect(); // close() would release the app under the CLI
  }

  // 3. Ctrl-C: the step in flight finishes; metrics, checkpoint and report are written; the app is released.
  second.child.kill("SIGINT");
  assert.equal(await second.code, 130, second.out());
  assert.match(second.out(), /interrupted: stopping after the current step/);
  // The re-run is a new run: its metrics.jsonl starts at its step 1; the killed run's is kept beside it.
  const rerun = readFileSync(path.join(work, "rr", "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number });
  assert.deepEqual(rerun.map((m) => m.step), Array.from({ length: rerun.length }, (_, i) => i + 1), "the re-run's steps only");
  const aside = readdirSync(path.join(work, "rr")).filter((f) => /^metrics-.*\.jsonl$/.test(f));
  assert.equal(aside.length, 1, "the killed run's metrics were moved aside");
  assert.equal(JSON.parse(readFileSync(path.join(work, "rr", aside[0]!), "utf8").split("\n")[0]!).step, 1);
  assert.match(second.out(), /held an earlier run's metrics\.jsonl: moved to metrics-/);
  assert.ok(rerun.length >= 1 && rerun.length < 200, `the re-run stopped early (${rerun.length} steps)`);
  const driverState = JSON.parse(readFileSync(path.join(work, "rr", "checkpoint", "driver-state.json"), "utf8")) as { step: number };
  assert.equal(driverState.step, rerun.at(-1)!.step, "the checkpoint holds the re-run's last finished step");
  assert.ok(existsSync(path.join(work, "rr", "report.html")));
  assert.ok(!(await apps()).includes("rr"), "the app was released");
});
