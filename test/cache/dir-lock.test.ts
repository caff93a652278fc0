/**
 * The node-local folder lock (sdk/cache/dir-lock.ts) across real processes:
 * six processes take and release one lock a few hundred times at once; no
 * take ever throws (a lock made by mkdir and then filled with its holder's
 * pid had a window where another process removed it, and the holder's second
 * mkdir failed with ENOENT), and no two processes ever hold it together. A
 * lock whose holder died is taken over; one held by a live process is not.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { pathToFileURL } from "node:url";
import { tryLock, unlock } from "../../sdk/cache/dir-lock.js";

const work = mkdtempSync(path.join(os.tmpdir(), "hearth-dir-lock-"));
const moduleUrl = pathToFileURL(path.join(import.meta.dirname, "../../sdk/cache/dir-lock.js")).href;
after(() => rmSync(work, { recursive: true, force: true }));

// Each child: take the lock ROUNDS times; while holding it, claim a marker that only one holder may hold at a time.
const child = (lock: string, marker: string, rounds: number): string => `
import { mkdirSync, rmdirSync } from "node:fs";
import { tryLock, unlock } from ${JSON.stringify(moduleUrl)};
let held = 0, overlaps = 0;
while (held < ${rounds}) {
  if (!tryLock(${JSON.stringify(lock)})) continue;
  try { mkdirSync(${JSON.stringify(marker)}); } catch { overlaps++; unlock(${JSON.stringify(lock)}); continue; }
  rmdirSync(${JSON.stringify(marker)});
  unlock(${JSON.stringify(lock)});
  held++;
}
console.log(JSON.stringify({ held, overlaps }));
`;

test("six processes contending for one lock: no take throws, never two holders at once", async () => {
  const lock = path.join(work, "contended.lock");
  const marker = path.join(work, "holder");
  const runs = Array.from({ length: 6 }, () =>
    new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const p = spawn(process.execPath, ["--input-type=module", "-e", child(lock, marker, 300)], { stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      let err = "";
      p.stdout.on("data", (d: Buffer) => (out += d.toString()));
      p.stderr.on("data", (d: Buffer) => (err += d.toString()));
      p.on("close", (code) => resolve({ code, out, err }));
    }),
  );
  for (const r of await Promise.all(runs)) {
    assert.equal(r.code, 0, `a contender failed: ${r.err}`);
    assert.deepEqual(JSON.parse(r.out), { held: 300, overlaps: 0 });
  }
  assert.deepEqual(readdirSync(work).filter((n) => n.startsWith("contended")), [], "nothing is left behind");
});

test("a dead holder's lock is taken over; a live holder's is not", () => {
  const lock = path.join(work, "stale.lock");
  const dead = spawnSync(process.execPath, ["-e", "console.log(process.pid)"], { encoding: "utf8" });
  const deadPid = Number(dead.stdout.trim());
  mkdirSync(path.join(lock, `pid-${deadPid}`), { recursive: true });
  assert.equal(tryLock(lock), true, "the holder is dead");
  assert.deepEqual(readdirSync(lock), [`pid-${process.pid}`]);
  unlock(lock);

  const live = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60000)"], { stdio: "ignore" });
  try {
    mkdirSync(path.join(lock, `pid-${live.pid}`), { recursive: true });
    assert.equal(tryLock(lock), false, "the holder is alive");
    unlock(lock);
    assert.deepEqual(readdirSync(lock), [`pid-${live.pid}`], "unlock leaves another holder's lock alone");
  } finally {
    live.kill("SIGKILL");
  }
});
