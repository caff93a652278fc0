/**
 * Runs that outlive their client, on real processes: `hearth train
 * search-r1 --detach` returns at once and the loop, a service of the run's
 * app, keeps stepping with no client connected (the app's only driver is
 * the loop itself); `hearth attach` from a new process prints the whole
 * history then live steps, and Ctrl-C leaves the run going; `hearth pause`
 * holds it (the log shows no step between paused and running) and `resume`
 * lets it go on; `hearth stop` ends it after its step with its outputs in
 * the cache, `hearth fetch` writes them and the checkpoint is one
 * `--resume` accepts; `hearth stop` waits for the run's end (so `stop &&
 * fetch` works), with a deadline and `--no-wait`; a user holding another
 * app's token is refused by `hearth attach` and `hearth stop` and the run
 * goes on unchanged, and that app does not see the run from its own.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { connect } from "../../sdk/connect.js";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import { smallRun } from "./small-run.js";
import { readLoopStatus, type LoopStatus } from "../../sdk/rl/state/run-log.js";
import { appToken, loadSecret, secretFile } from "../../sdk/wire/auth.js";
import { CLI, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";

const exec = promisify(execFile);
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-detach-"));
let cluster: TestCluster;
const NAME = "detached1";

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 3, mem: "8g" }] });
});
after(async () => {
  await cluster?.stop();
});

const small = ["--prompts-per-step", "2", "--prompts-per-task", "1", "--group-size", "2", "--eval-size", "4", "--eval-every", "0", "--bootstrap-steps", "2"];

async function hearth(...args: string[]): Promise<string> {
  return (await exec(process.execPath, [CLI, ...args, "--head", cluster.endpoint], { timeout: 60_000 })).stdout;
}

/** The run's status as `hearth runs --json` (a client that connects, reads and leaves) reports it. */
async function runStatus(): Promise<LoopStatus> {
  const runs = JSON.parse(await hearth("runs", "--json")) as LoopStatus[];
  const r = runs.find((s) => s.name === NAME);
  assert.ok(r, `hearth runs lists ${NAME}`);
  return r;
}

async function driversOf(app: string): Promise<number> {
  return ((await cluster.status()).apps as Array<{ name: string; drivers: number }>).find((a) => a.name === app)?.drivers ?? 0;
}

test("a detached run steps with no client, attaches from anywhere, pauses, resumes, stops into a checkpoint --resume accepts", async () => {
  // --out is where the loop writes, not the client: refused with what to do instead.
  await assert.rejects(exec(process.execPath, [CLI, "train", "search-r1", "--head", cluster.endpoint, "--name", "x", "--out", work, "--detach"]), /--out does not apply to a detached run/);

  const started = await exec(process.execPath, [CLI, "train", "search-r1", "--head", cluster.endpoint, "--name", NAME, "--steps", "500", ...small, "--detach"], { timeout: 120_000 });
  assert.match(started.stdout, new RegExp(`hearth attach ${NAME}`));

  // Every client is gone: the loop is the app's only driver, and the step counter still advances.
  const s1 = await waitFor("the detached run's first step", async () => ((await runStatus()).step >= 1 ? runStatus() : undefined), 240_000);
  assert.equal(s1.state, "running");
  assert.equal(await driversOf(NAME), 1, "the loop itself is the run app's one driver");
  const s2 = await waitFor("a later step with no client attached", async () => {
    const s = await runStatus();
    return s.step > s1.step ? s : undefined;
  }, 120_000);
  assert.ok(s2.step > s1.step);

  // Attach from a new process: the whole history from step 1, then a step that happened after it attached.
  const attach = spawn(process.execPath, [CLI, "attach", NAME, "--head", cluster.endpoint], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  attach.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  attach.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => attach.on("exit", (code) => resolve(code)));
  const steps = (): number[] => [...out.matchAll(/^step +(\d+) /gm)].map((m) => Number(m[1]));
  await waitFor("the history so far", () => (steps().length >= s2.step ? true : undefined), 30_000);
  const atAttach = (await runStatus()).step;
  await waitFor("a live step after attaching", () => (steps().some((n) => n > atAttach) ? true : undefined), 120_000);
  const seen = steps();
  assert.deepEqual(seen, seen.map((_, i) => i + 1), "every step from the first, in order, none twice");
  assert.match(out, /^\[warming\]$/m);
  attach.kill("SIGINT");
  assert.equal(await exited, 0, out);
  assert.match(out, /detached from 'detached1'/);
  // Detaching leaves the run going.
  const afterDetach = (await runStatus()).step;
  await waitFor("a step after the attacher left", async () => ((await runStatus()).step > afterDetach ? true : undefined), 120_000);

  // Pause: held after the step in flight; resume: steps again.
  await hearth("pause", NAME);
  const paused = await waitFor("the run to pause", async () => {
    const s = await runStatus();
    return s.state === "paused" ? s : undefined;
  }, 120_000);
  await hearth("resume", NAME);
  await waitFor("a step after resuming", async () => ((await runStatus()).step > paused.step ? true : undefined), 120_000);
  const app = await connect({ name: NAME, head: cluster.endpoint });
  try {
    const events = await app.objects.get<Array<{ type: string; state?: string; step?: number }>>(`runs/${NAME}/events`);
    const from = events.findIndex((e) => e.type === "state" && e.state === "paused");
    const to = events.findIndex((e, i) => i > from && e.type === "state" && e.state === "running");
    assert.ok(from >= 0 && to > from, "the log records the pause and the resume");
    assert.deepEqual(events.slice(from, to).filter((e) => e.type === "step"), [], "no step ran while paused");
    assert.equal(events.slice(to).find((e) => e.type === "step")?.step, paused.step + 1, "the first step after resuming is the next one");
  } finally {
    await app.disconnect();
  }

  // A user holding another app's token (HEARTH_APP_TOKEN, what `hearth token someone-else` prints): `hearth attach`
  // and `hearth stop` of this run are refused at the handshake, and the run goes on as it was.
  const secret = loadSecret(secretFile());
  const otherToken = appToken(secret, "someone-else");
  const before = await runStatus();
  for (const command of ["attach", "stop"]) {
    const refused = await exec(process.execPath, [CLI, command, NAME, "--head", cluster.endpoint], { timeout: 60_000, env: { ...process.env, HEARTH_APP_TOKEN: otherToken } }).then(
      () => assert.fail(`hearth ${command} ${NAME} with another app's token should have been refused`),
      (e: { code: number; stdout: string; stderr: string }) => e,
    );
    assert.equal(refused.code, 1, `hearth ${command}: ${refused.stderr}`);
    assert.match(refused.stderr, /^hearth: the server refused this connection in the ZeroMQ handshake/m, `hearth ${command}`);
    assert.doesNotMatch(refused.stdout, /step +\d+ /, `hearth ${command} printed none of the run's log`);
  }
  const unchanged = await waitFor("a step after the refused stop", async () => {
    const s = await runStatus();
    return s.step > before.step ? s : undefined;
  }, 120_000);
  assert.equal(unchanged.state, "running", "the refused stop did not stop it");
  assert.equal(unchanged.startedAt, before.startedAt, "the same run");
  const reader = await connect({ name: NAME, head: cluster.endpoint });
  try {
    const events = await reader.objects.get<Array<{ type: string; state?: string }>>(`runs/${NAME}/events`);
    assert.deepEqual(events.filter((e) => e.type === "state" && e.state === "stopping"), [], "nothing asked it to stop");
  } finally {
    await reader.disconnect();
  }
  // That token opens its own app only, which holds no such run.
  const other = { role: "driver" as const, id: "someone-else", app: "someone-else", key: Buffer.from(otherToken, "hex") };
  const theirs = await connect({ name: "someone-else", head: cluster.endpoint, credential: other });
  try {
    assert.equal(await readLoopStatus(theirs.objects, NAME), undefined);
  } finally {
    await theirs.close();
  }

  // Stop: like `docker stop`, the command returns once the run has ended (after its step: outputs written and put
  // in the cache; the rollouts and trainers released), printing what the run does meanwhile; so `stop && fetch` works.
  const stopped = await exec(process.execPath, [CLI, "stop", NAME, "--head", cluster.endpoint], { timeout: 300_000 });
  assert.match(stopped.stdout, /^stopping run 'detached1' after its step in flight \(waiting up to 600 s/m);
  assert.match(stopped.stdout, /^\[stopping\]$/m, "its progress: the state change");
  assert.match(stopped.stdout, /^metrics: \S+\/metrics\.jsonl +report: \S+report\.html +checkpoint: /m, "its progress: where its outputs went");
  const doneLine = /^run 'detached1' is done at step (\d+)\/(\d+): hearth fetch detached1 --out DIR writes its outputs$/m.exec(stopped.stdout);
  assert.ok(doneLine, stopped.stdout);
  const done = await runStatus();
  assert.equal(done.state, "done", `done when stop returned (${done.why ?? ""})`);
  assert.equal(done.step, Number(doneLine[1]), "at the step stop reported");
  const services = ((await cluster.status()).apps as Array<{ name: string; services: Array<{ name: string; state: string }> }>).find((a) => a.name === NAME)!.services;
  assert.deepEqual(services.filter((s) => s.name !== "loop" && s.state !== "stopped"), [], "rollouts and trainers released");
  const fetched = path.join(work, "fetched");
  await hearth("fetch", NAME, "--out", fetched);
  const metrics = readFileSync(path.join(fetched, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number });
  assert.deepEqual(metrics.map((m) => m.step), Array.from({ length: done.step }, (_, i) => i + 1));
  assert.ok(existsSync(path.join(fetched, "report.html")), "the report");
  const ckpt = JSON.parse(readFileSync(path.join(fetched, "checkpoint", "driver-state.json"), "utf8")) as { step: number };
  assert.equal(ckpt.step, done.step);

  // The fetched checkpoint is one --resume accepts, detached too: it travels to the loop through the cache, and the run goes on at the next step.
  await assert.rejects(hearth("train", "search-r1", "--name", "resumed1", "--detach", "--resume", work), /checkpoint/i);
  await hearth("train", "search-r1", "--name", "resumed1", "--steps", "1", ...small, "--detach", "--resume", path.join(fetched, "checkpoint"));
  const resumed = await waitFor("the resumed run to end", async () => {
    const s = (JSON.parse(await hearth("runs", "--json")) as LoopStatus[]).find((r) => r.name === "resumed1");
    return s && (s.state === "done" || s.state === "failed") ? s : undefined;
  }, 240_000);
  assert.equal(resumed.state, "done", resumed.why);
  assert.equal(resumed.step, done.step + 1);
  const again = path.join(work, "resumed");
  await hearth("fetch", "resumed1", "--out", again);
  const log = readFileSync(path.join(again, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number });
  assert.equal(log.at(-1)!.step, done.step + 1, "the step after the checkpoint's");

  // A run of the same name after the first ended: its loop takes the new run.
  await hearth("train", "search-r1", "--name", NAME, "--steps", "500", ...small, "--detach");
  await waitFor("the second run of the name to step", async () => {
    const s = await runStatus();
    return s.startedAt > done.startedAt && s.step >= 1 ? s : undefined;
  }, 240_000);
  // stop's flags are checked before it asks anything.
  await assert.rejects(hearth("stop", NAME, "--timeout", "soon"), /bad duration 'soon'/);
  await assert.rejects(hearth("stop", NAME, "--timeout", "5m", "--no-wait"), /--timeout is how long to wait, --no-wait not to: give one of them/);
  await assert.rejects(hearth("pause", NAME, "--no-wait"), /--timeout and --no-wait are flags of hearth stop/);
  assert.equal((await runStatus()).state, "running", "a refused stop asked nothing");
  // Past its deadline, stop exits 1 saying so, and the run goes on stopping: the deadline (1 ms) passes before its
  // step in flight, final evaluation, checkpoint and report could be written.
  const late = await exec(process.execPath, [CLI, "stop", NAME, "--timeout", "1ms", "--head", cluster.endpoint], { timeout: 60_000 }).then(
    () => assert.fail("stop --timeout 1ms returned before the run could end"),
    (e: { code: number; stderr: string }) => e,
  );
  assert.equal(late.code, 1);
  assert.match(late.stderr, /^hearth: run 'detached1' did not end within 1 ms of the stop: it is (running|stopping) at step \d+ of \d+, and goes on stopping \(hearth attach detached1 follows it\)$/m);
  // --no-wait returns at once, the run still stopping or (its end is quick here) already done: like docker stop of a
  // stopped container, a stop of a run that has ended succeeds, so `stop && fetch` works whenever it runs.
  assert.match(await hearth("stop", NAME, "--no-wait"), /^run 'detached1' (stops after its step in flight, .*not waiting\)|is done at step \d+\/\d+: hearth fetch)/m);
  const again2 = await waitFor("the second run of the name to end", async () => {
    const s = await runStatus();
    return s.state === "done" || s.state === "failed" ? s : undefined;
  }, 240_000);
  assert.equal(again2.state, "done", again2.why);
  const second = path.join(work, "second");
  await hearth("fetch", NAME, "--out", second);
  const secondSteps = readFileSync(path.join(second, "metrics.jsonl"), "utf8").trim().split("\n").map((l) => (JSON.parse(l) as { step: number }).step);
  assert.deepEqual(secondSteps, Array.from({ length: again2.step }, (_, i) => i + 1), "a new run, from its first step");

  // `hearth runs` lists runs driven from outside the cluster too: attached while a driver is connected, idle once it left.
  const driven = await SearchR1Run.create(smallRun(cluster.endpoint, "driven1", path.join(work, "driven")));
  const listed = async (): Promise<Record<string, unknown> | undefined> => (JSON.parse(await hearth("runs", "--json")) as Array<Record<string, unknown>>).find((r) => r.name === "driven1");
  try {
    await driven.step();
    assert.deepEqual(await listed(), { name: "driven1", state: "attached", step: 1, drivers: 1 });
    assert.match(await hearth("runs"), /^driven1 +attached +1\/\? .*its loop runs in 1 driver\(s\) outside the cluster$/m);
  } finally {
    await driven.disconnect();
  }
  assert.deepEqual(await listed(), { name: "driven1", state: "idle", step: 1, drivers: 0 });
});
