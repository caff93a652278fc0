/**
 * What a start sweeps (a killed head's spool, a killed agent's executors'
 * temp folders) it judges by the stamp its maker left (cluster-agent/pids.ts):
 * a folder whose process exited goes, and so does one whose pid now names a
 * process that started at another time (reused); one of a live process, or
 * of another pid namespace or boot (a container sharing the folder, whose
 * pids say nothing here), stays. A folder from before stamps is judged by
 * the pid in its name, as before. The makers here are real processes that
 * exit without cleaning up, as kill -9 leaves them.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { leftScratch, makeScratch, sweepScratch } from "../../cluster-agent/executor-scratch.js";
import { makeSpool } from "../../cluster-agent/head/store-files.js";
import { OWNER_FILE, selfStamp, startTicks } from "../../cluster-agent/pids.js";
import { DIST } from "../helpers/cluster.js";

const root = mkdtempSync(path.join(os.tmpdir(), "hearth-stamps-"));
after(() => rmSync(root, { recursive: true, force: true }));

/** Runs `body` (a module's code, with `mod` the module at `modulePath` in dist) in a process that then exits; returns what it printed. */
function inExitedProcess(modulePath: string, body: string): string {
  const script = `const mod = await import(${JSON.stringify(path.join(DIST, modulePath))}); ${body}`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

/** A pid that names no process here. */
const DEAD = 2 ** 22 + 13;
/** A live process other than this one (the test runner), and when it started. */
const LIVE = process.ppid;

function stamp(dir: string, s: { pid: number; start?: number; ns?: string }): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeFileSync(path.join(dir, OWNER_FILE), JSON.stringify(s));
}

test("a start removes the spools of heads that are gone, by their stamps, and no other", () => {
  const parent = path.join(root, "spools");
  mkdirSync(parent);
  const me = selfStamp();
  assert.ok(me.start !== undefined && me.ns !== undefined && startTicks(LIVE) !== undefined, "this machine's /proc says when processes started and in which pid namespace");
  const exited = inExitedProcess("cluster-agent/head/store-files.js", `const s = mod.makeSpool(${JSON.stringify(parent)}); (await import("node:fs")).writeFileSync(s.dir + "/part.receiving", "x"); console.log(s.dir);`);
  assert.ok(existsSync(path.join(exited, OWNER_FILE)), "a spool holds its maker's stamp");
  const at = (name: string) => path.join(parent, name);
  stamp(at(`hearth-spool-${LIVE}-reused`), { pid: LIVE, start: startTicks(LIVE)! - 1, ns: me.ns });
  stamp(at(`hearth-spool-${LIVE}-live`), { pid: LIVE, start: startTicks(LIVE), ns: me.ns });
  stamp(at(`hearth-spool-${DEAD}-container`), { pid: DEAD, start: 5, ns: "pid:[4026530000] boot another" });
  mkdirSync(at(`hearth-spool-${DEAD}-unstamped`));

  const { dir: own, swept } = makeSpool(parent);
  assert.deepEqual(swept.map((d) => path.basename(d)).sort(), [path.basename(exited), `hearth-spool-${DEAD}-unstamped`, `hearth-spool-${LIVE}-reused`].sort());
  assert.deepEqual(readdirSync(parent).sort(), [path.basename(own), `hearth-spool-${DEAD}-container`, `hearth-spool-${LIVE}-live`].sort());
});

test("a starting agent removes the executors' temp folders of agents that are gone, by their stamps, and no other", async () => {
  const workDir = path.join(root, "work");
  const exited = inExitedProcess("cluster-agent/executor-scratch.js", `const s = mod.makeScratch(${JSON.stringify(workDir)}, "e1"); (await import("node:fs")).writeFileSync(s.dir + "/shard-0.safetensors", "x"); console.log(s.dir);`);
  const exitedAgent = path.dirname(exited);
  assert.ok(existsSync(path.join(exitedAgent, OWNER_FILE)), "an agent's folder of temp folders holds its stamp");
  const tmp = path.join(workDir, "tmp");
  const me = selfStamp();
  stamp(path.join(tmp, `p${LIVE}`), { pid: LIVE, start: startTicks(LIVE)! - 1, ns: me.ns });
  mkdirSync(path.join(tmp, `p${LIVE}`, "e2"));
  stamp(path.join(tmp, `p${DEAD}`), { pid: DEAD, start: 5, ns: "pid:[4026530000] boot another" });
  mkdirSync(path.join(tmp, `p${DEAD}`, "e3"));
  const mine = makeScratch(workDir, "e4");

  const found = leftScratch(workDir);
  assert.deepEqual(
    found.map((f) => [path.basename(f.agentDir), f.dirs.map((d) => path.basename(d.dir))]).sort(),
    [
      [path.basename(exitedAgent), ["e1"]],
      [`p${LIVE}`, ["e2"]],
    ].sort(),
    "the exited agent's and the reused pid's, each with its executors' folders (the stamp is not one)",
  );
  assert.deepEqual(await sweepScratch(workDir), { removed: 2, failed: [] });
  assert.deepEqual(readdirSync(tmp).sort(), [`p${DEAD}`, `p${process.pid}`].sort(), "their folders went whole; another namespace's and this agent's stay");
  assert.ok(existsSync(mine.dir));
});
