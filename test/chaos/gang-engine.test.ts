/**
 * A gang member whose tensor engine dies or hangs fails the whole gang within
 * 5 s, with an error naming the rank, on real processes: two trainer ranks
 * whose engines all-reduce every step over gloo. One engine is killed with
 * SIGKILL mid-training (the executor's heartbeat reports it at once); in the
 * other test one is stopped with SIGSTOP (its process stops heartbeating, the
 * link kills it as hung after DEFAULT_HANG_TIMEOUT_MS). Detection times are
 * measured from the signal to the driver's rejection and printed.
 */
import assert from "node:assert/strict";
import { chownSync, existsSync, mkdtempSync, readFileSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { GangFailedError } from "../../sdk/errors/index.js";
import { DIST, pidAlive, rejection, startCluster, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";
import type { TrainerRank } from "./services.js";

const ref = { module: path.join(DIST, "test/chaos/services.js"), export: "TrainerRank" };
/** The promise under test: the gang fails this soon after an engine dies or hangs. */
const GANG_FAILS_WITHIN_MS = 5_000;

let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "trainers", cpus: 4, mem: "8g" }] });
  app = await connect({ name: "gang-engine", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

/** Declares a 2-rank trainer gang, starts training, and returns once every rank has finished a step. */
async function trainingGang(name: string) {
  const gang = await app.service<TrainerRank>(ref, { name, resreq: "cpu=1", warmup: 2, autoscale: false, readyTimeoutMs: 120_000 });
  const pids = await gang.withOptions({ timeoutMs: 10_000 }).broadcast("pids", [[], []]);
  assert.deepEqual(pids.map((p) => p.rank), [0, 1]);
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-steps-"));
  // The ranks write their progress here: an agent run as root starts them as their app's own user, so the folder is theirs.
  const { uid, gid } = statSync(`/proc/${pids[0]!.executorPid}`);
  chownSync(dir, uid, gid);
  const progress = path.join(dir, "step");
  // Far more steps than the test waits for: the ranks are mid-training when the signal lands.
  const training = gang.withOptions({ timeoutMs: 60_000 }).broadcast("train", [[100_000, progress], [100_000, progress]]);
  const ended = rejection(training);
  await waitFor("both ranks to finish a step", () => {
    const done = [0, 1].every((r) => existsSync(`${progress}.${r}`) && Number(readFileSync(`${progress}.${r}`, "utf8")) >= 1);
    return done ? true : undefined;
  }, 60_000);
  return { gang, pids, ended };
}

/** Every member's executor and engine exits once the gang failed (nothing is left holding a GPU). */
async function allGone(pids: Array<{ executorPid: number; enginePid: number }>): Promise<void> {
  for (const p of pids) {
    await waitForExit("a gang member's executor", p.executorPid, 20_000);
    await waitForExit("a gang member's engine", p.enginePid, 10_000);
  }
}

test("kill -9 of one trainer rank's engine mid-step fails the gang within 5 s, naming the rank", { timeout: 180_000 }, async () => {
  const { gang, pids, ended } = await trainingGang("killed");
  const victim = pids[1]!;
  const t0 = Date.now();
  process.kill(victim.enginePid, "SIGKILL");
  const { error, ms } = await rejection(ended.then((r) => Promise.reject(r.error)), t0);
  console.log(`# gang-engine: engine of rank 1 killed (SIGKILL): gang failed after ${ms} ms`);
  assert.ok(error instanceof GangFailedError, String(error));
  assert.equal(error.rank, 1);
  assert.match(error.message, new RegExp(`gang 'killed' lost rank 1 .*its tensor engine \\(pid ${victim.enginePid}\\) died`));
  assert.ok(ms < GANG_FAILS_WITHIN_MS, `the gang failed ${ms} ms after the engine died`);
  await assert.rejects(gang.callRank(0, "pids"), GangFailedError, "later calls fail fast with the same error");
  await allGone(pids);
});

test("SIGSTOP of one trainer rank's engine (a hang) fails the gang within 5 s, naming the rank", { timeout: 180_000 }, async () => {
  const { pids, ended } = await trainingGang("stopped");
  const victim = pids[0]!;
  const t0 = Date.now();
  process.kill(victim.enginePid, "SIGSTOP");
  try {
    const { error, ms } = await rejection(ended.then((r) => Promise.reject(r.error)), t0);
    console.log(`# gang-engine: engine of rank 0 stopped (SIGSTOP): gang failed after ${ms} ms`);
    assert.ok(error instanceof GangFailedError, String(error));
    assert.equal(error.rank, 0);
    assert.match(error.message, new RegExp(`gang 'stopped' lost rank 0 .*its tensor engine \\(pid ${victim.enginePid}\\) hung \\(no heartbeat from its process for \\d+ ms\\)`));
    assert.ok(ms < GANG_FAILS_WITHIN_MS, `the gang failed ${ms} ms after the engine hung`);
    await allGone(pids);
  } finally {
    if (pidAlive(victim.enginePid)) process.kill(victim.enginePid, "SIGKILL");
  }
});
