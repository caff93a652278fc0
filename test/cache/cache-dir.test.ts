/**
 * `--cache-dir` is hearth's only if hearth made it (cluster-agent/cache-dir.ts).
 * A folder holding the user's files is refused and left exactly as it was
 * (the agent, started for real, exits saying so); a link, a folder another
 * user owns or can write, or one whose parent anyone can swap it out of is
 * refused; a new folder is made, marked and removed at the end; an empty one
 * is taken over and left empty; what a killed agent left in a marked folder
 * is removed by the next start; a folder a live agent holds is refused; the
 * folders agents no longer running left beside an agent's own default one
 * (/dev/shm) are removed when it starts, and nothing else.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { CACHE_MARKER, claimCacheDir, releaseCacheDir, sweepDeadCaches } from "../../cluster-agent/cache-dir.js";
import { selfStamp } from "../../cluster-agent/pids.js";
import { UsageError } from "../../sdk/errors/index.js";
import { CLI, startCluster, waitFor, waitForExit, type TestCluster } from "../helpers/cluster.js";

const root = mkdtempSync(path.join(os.tmpdir(), "hearth-cachedir-"));
const isRoot = process.geteuid?.() === 0;

after(() => rmSync(root, { recursive: true, force: true }));

/** A folder holding a user's files (and a subfolder), and a snapshot of it to compare against. */
function userFolder(name: string): { dir: string; snapshot: () => string } {
  const dir = path.join(root, name);
  mkdirSync(path.join(dir, "notes"), { recursive: true, mode: 0o755 });
  writeFileSync(path.join(dir, "thesis.tex"), "chapter one");
  writeFileSync(path.join(dir, "notes", "todo.txt"), "finish chapter two");
  const snapshot = (): string =>
    JSON.stringify(
      ["thesis.tex", "notes/todo.txt"].map((f) => [f, readFileSync(path.join(dir, f), "utf8")]).concat([["entries", readdirSync(dir).sort().join(",")]]),
    );
  return { dir, snapshot };
}

function refused(f: () => unknown, pattern: RegExp): void {
  assert.throws(f, (err: Error) => {
    assert.ok(err instanceof UsageError, `${err.name}: ${err.message}`);
    assert.equal(err.flag, "--cache-dir");
    assert.match(err.message, pattern);
    return true;
  });
}

test("a folder holding files hearth did not make is refused and left exactly as it was", () => {
  const { dir, snapshot } = userFolder("data");
  const before = snapshot();
  refused(() => claimCacheDir(dir, "n1"), /holds 2 entries hearth did not make \("notes", "thesis.tex"\).*nothing in this one was touched/);
  assert.equal(snapshot(), before);
});

test("hearth agent --cache-dir on the user's data exits with the reason, and the data stays", { timeout: 60_000 }, async () => {
  const { dir, snapshot } = userFolder("home-data");
  const before = snapshot();
  const cluster = await startCluster({ agents: [] });
  try {
    const r = spawnSync(process.execPath, [CLI, "agent", "--head", cluster.endpoint, "--id", "cd1", "--work-dir", path.join(root, "w-cd1"), "--cache-dir", dir], { encoding: "utf8", timeout: 30_000 });
    assert.equal(r.status, 1, `the agent exited: ${r.stderr}`);
    assert.match(r.stderr, /hearth: --cache-dir .*home-data: it holds 2 entries hearth did not make/);
    assert.equal(snapshot(), before, "not a byte of the user's folder changed");
  } finally {
    await cluster.stop();
  }
});

test("a new folder is made, marked, emptied of what hearth put there and removed at the end", () => {
  const dir = path.join(root, "fresh", "cache");
  const claim = claimCacheDir(dir, "n1");
  assert.equal(claim.created, true);
  assert.deepEqual(readdirSync(dir), [CACHE_MARKER]);
  assert.equal(statSync(dir).mode & 0o777, 0o711);
  mkdirSync(path.join(dir, "a-app"));
  writeFileSync(path.join(dir, "a-app", "part"), "bytes");
  releaseCacheDir(claim);
  assert.equal(existsSync(dir), false);
  assert.equal(existsSync(path.dirname(dir)), true, "its parent stays");
});

test("an empty folder is taken over, and left (empty) at the end", () => {
  const dir = path.join(root, "empty");
  mkdirSync(dir, { mode: 0o700 });
  const claim = claimCacheDir(dir, "n1");
  assert.equal(claim.created, false);
  writeFileSync(path.join(dir, "part"), "bytes");
  releaseCacheDir(claim);
  assert.deepEqual(readdirSync(dir), [], "what hearth put there (and its marker) went; the folder stays");
});

test("what a killed agent left in its folder is removed by the next start, and counted", () => {
  const dir = path.join(root, "killed");
  const first = claimCacheDir(dir, "n1");
  mkdirSync(path.join(dir, "u123"), { recursive: true });
  writeFileSync(path.join(dir, "u123", "abc.1.base"), Buffer.alloc(5000));
  writeFileSync(path.join(dir, "u123", "abc.99-1.receiving"), Buffer.alloc(3000));
  // The agent died (kill -9): its marker names a pid that is gone.
  writeFileSync(path.join(dir, CACHE_MARKER), JSON.stringify({ agent: "n1", pid: 2 ** 22 + 7, created: first.created }));
  const next = claimCacheDir(dir, "n1");
  assert.deepEqual(readdirSync(dir), [CACHE_MARKER], "nothing the killed agent left remains");
  assert.deepEqual(next.leftover, { entries: 3, bytes: 8000 });
  assert.equal(next.created, true, "still hearth's own folder: it goes at the end");
  releaseCacheDir(next);
  assert.equal(existsSync(dir), false);
});

test("a folder a live agent holds is refused", () => {
  const dir = path.join(root, "held");
  mkdirSync(dir, { mode: 0o700 });
  writeFileSync(path.join(dir, CACHE_MARKER), JSON.stringify({ agent: "other", pid: process.ppid, created: false }));
  refused(() => claimCacheDir(dir, "n2"), /agent other \(pid \d+\) holds it; give each agent its own --cache-dir/);
});

test("a symbolic link is refused, and what it points to is untouched", () => {
  const { dir: target, snapshot } = userFolder("link-target");
  const before = snapshot();
  const link = path.join(root, "link");
  symlinkSync(target, link);
  refused(() => claimCacheDir(link, "n1"), /it is a symbolic link/);
  assert.equal(snapshot(), before);
});

test("a folder another user owns, or others can write, is refused", { skip: isRoot ? false : "needs root to make a folder another user owns" }, () => {
  const foreign = path.join(root, "foreign");
  mkdirSync(foreign, { mode: 0o700 });
  chownSync(foreign, 12345, 12345);
  refused(() => claimCacheDir(foreign, "n1"), /it belongs to uid 12345, not to this agent's user \(0\)/);
  const open = path.join(root, "open");
  mkdirSync(open);
  chmodSync(open, 0o777);
  refused(() => claimCacheDir(open, "n1"), /it is writable by others \(mode 0777\)/);
  assert.deepEqual(readdirSync(open), [], "nothing was written into it");
});

test("a folder under a parent anyone can write and that is not sticky is refused; under a sticky one it is fine", () => {
  const shared = path.join(root, "shared");
  mkdirSync(shared);
  chmodSync(shared, 0o777);
  refused(() => claimCacheDir(path.join(shared, "cache"), "n1"), /its parent .*shared is writable by others \(mode 0777\) and not sticky/);
  assert.equal(existsSync(path.join(shared, "cache")), false, "nothing was made there");
  chmodSync(shared, 0o1777);
  const claim = claimCacheDir(path.join(shared, "cache"), "n1");
  releaseCacheDir(claim);
});

test("two agents of one id on one machine (each HEARTH_HOME's `local`) get node caches of their own on /dev/shm", { timeout: 90_000 }, async () => {
  // The embedded default names its agent "local" in every HEARTH_HOME: a run's agent outlives it, and the next HEARTH_HOME's must still start.
  const a = await startCluster({ agents: [{ id: "local", args: ["--cache-medium", "memory"] }] });
  try {
    const b = await startCluster({ agents: [{ id: "local", args: ["--cache-medium", "memory"] }] });
    try {
      // The folder is in the agent's heartbeat, once it has sent one.
      const cacheDir = (c: TestCluster) => waitFor("the agent's node cache report", async () => ((await c.status()).agents as Array<{ id: string; cache?: { dir?: string } | null }>).find((x) => x.id === "local")?.cache?.dir ?? undefined);
      const dirs = await Promise.all([cacheDir(a), cacheDir(b)]);
      assert.ok(dirs.every((d) => d !== undefined && d.startsWith("/dev/shm/hearth-cache-local-")), `both caches on /dev/shm: ${dirs.join(", ")}`);
      assert.notEqual(dirs[0], dirs[1], "each its own folder");
    } finally {
      await b.stop();
    }
  } finally {
    await a.stop();
  }
});

/** The names agents' default folders have in /dev/shm. */
const DEFAULT_NAMES = /^hearth-cache-.+-[0-9a-f]{10}$/;

/** A folder claimed by a real process that then exited without giving it back (as kill -9 leaves it), holding `bytes` in one file. */
function leftByExitedAgent(dir: string, agent: string, bytes: number): void {
  const script = `
    const { claimCacheDir } = await import(${JSON.stringify(path.join(CLI, "../cache-dir.js"))});
    const { writeFileSync } = await import("node:fs");
    claimCacheDir(${JSON.stringify(dir)}, ${JSON.stringify(agent)});
    writeFileSync(${JSON.stringify(path.join(dir, "part"))}, Buffer.alloc(${bytes}));`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.ok(existsSync(path.join(dir, "part")));
}

test("a starting agent removes the default folders of agents that no longer run, and nothing else", () => {
  const shm = path.join(root, "shm");
  mkdirSync(shm, { mode: 0o1777 });
  const at = (name: string): string => path.join(shm, name);
  const me = selfStamp();
  assert.ok(me.start !== undefined && me.ns !== undefined, "this machine's /proc gives a process's start and pid namespace");
  // Gone: its process exited; and one whose pid now names a process that started at another time (reused).
  leftByExitedAgent(at("hearth-cache-gone-0123456789"), "gone", 7000);
  mkdirSync(at("hearth-cache-reused-0123456789"), { mode: 0o700 });
  writeFileSync(at(`hearth-cache-reused-0123456789/${CACHE_MARKER}`), JSON.stringify({ agent: "reused", pid: process.pid, start: me.start! - 1, ns: me.ns, created: true }));
  writeFileSync(at("hearth-cache-reused-0123456789/part"), Buffer.alloc(3000));
  // Kept: a live agent's; a dead process's of another pid namespace or boot (its pid says nothing here);
  // a marker from before markers said when and where (pid alone); a folder without a marker (it may be being made);
  // another name; this agent's own; a link to a gone one.
  const live = claimCacheDir(at("hearth-cache-live-0123456789"), "live");
  const kept = ["hearth-cache-live-0123456789", "hearth-cache-other-ns-0123456789", "hearth-cache-old-0123456789", "hearth-cache-unmarked-0123456789", "hearth-cache-notes", "hearth-cache-own-0123456789", "hearth-cache-link-0123456789"];
  for (const name of kept.slice(1, 6)) mkdirSync(at(name), { mode: 0o700 });
  const deadPid = 2 ** 22 + 11;
  writeFileSync(at(`hearth-cache-other-ns-0123456789/${CACHE_MARKER}`), JSON.stringify({ agent: "c", pid: deadPid, start: 1, ns: "pid:[4026530000] boot another", created: true }));
  writeFileSync(at(`hearth-cache-old-0123456789/${CACHE_MARKER}`), JSON.stringify({ agent: "old", pid: deadPid, created: true }));
  writeFileSync(at("hearth-cache-unmarked-0123456789/data"), "x");
  writeFileSync(at(`hearth-cache-notes/${CACHE_MARKER}`), JSON.stringify({ agent: "n", pid: deadPid, start: 1, ns: me.ns, created: true }));
  writeFileSync(at(`hearth-cache-own-0123456789/${CACHE_MARKER}`), JSON.stringify({ agent: "own", pid: deadPid, start: 1, ns: me.ns, created: true }));
  leftByExitedAgent(path.join(root, "link-target-cache"), "linked", 100);
  symlinkSync(path.join(root, "link-target-cache"), at("hearth-cache-link-0123456789"));

  const swept = sweepDeadCaches(shm, DEFAULT_NAMES, at("hearth-cache-own-0123456789"));
  assert.deepEqual(
    swept.map((s) => [path.basename(s.dir), s.agent, s.entries, s.bytes]).sort(),
    [
      ["hearth-cache-gone-0123456789", "gone", 1, 7000],
      ["hearth-cache-reused-0123456789", "reused", 1, 3000],
    ],
  );
  assert.deepEqual(readdirSync(shm).sort(), [...kept].sort(), "the gone ones went, nothing else (nor anything moved aside)");
  assert.ok(existsSync(path.join(root, "link-target-cache", "part")), "what the link points to is untouched");
  assert.deepEqual(readdirSync(at("hearth-cache-unmarked-0123456789")), ["data"]);
  releaseCacheDir(live);
});

test("a folder an agent of its id takes over while a sweep looks at it is given back to that agent", () => {
  const shm = path.join(root, "shm-race");
  mkdirSync(shm, { mode: 0o1777 });
  const dir = path.join(shm, "hearth-cache-back-0123456789");
  leftByExitedAgent(dir, "back", 1000);
  let claim: ReturnType<typeof claimCacheDir> | undefined;
  // Between the sweep's look (the marker names a gone process) and its move: the agent restarts and claims its folder.
  const swept = sweepDeadCaches(shm, DEFAULT_NAMES, path.join(shm, "mine"), {
    beforeMove: (d) => {
      claim = claimCacheDir(d, "back");
      writeFileSync(path.join(d, "new-part"), "the restarted agent's");
    },
  });
  assert.deepEqual(swept, [], "nothing removed");
  assert.ok(claim);
  assert.deepEqual(readdirSync(dir).sort(), [CACHE_MARKER, "new-part"], "the folder is where the agent claimed it, with what it wrote");
  assert.equal(JSON.parse(readFileSync(path.join(dir, CACHE_MARKER), "utf8")).pid, process.pid);
  assert.deepEqual(readdirSync(shm), ["hearth-cache-back-0123456789"], "nothing left moved aside");
  releaseCacheDir(claim);
});

test("an agent killed -9 leaves its node cache on /dev/shm; the next agent to start there removes it", { timeout: 90_000 }, async () => {
  const cluster = await startCluster({ agents: [{ id: "swept-a", args: ["--cache-medium", "memory"] }] });
  try {
    const dirOf = (id: string) => waitFor(`agent ${id}'s node cache report`, async () => ((await cluster.status()).agents as Array<{ id: string; cache?: { dir?: string } | null }>).find((x) => x.id === id)?.cache?.dir ?? undefined);
    const dir = await dirOf("swept-a");
    assert.ok(dir.startsWith("/dev/shm/hearth-cache-swept-a-"), dir);
    const a = cluster.agents.get("swept-a")!;
    a.kill("SIGKILL");
    await waitForExit("the killed agent", a.pid!);
    assert.ok(existsSync(path.join(dir, CACHE_MARKER)), "the killed agent left its folder");
    await cluster.addAgent({ id: "swept-b", args: ["--cache-medium", "memory"] });
    const line = await waitFor("the new agent's report of what it removed", () => new RegExp(`node cache: removed ${dir}, left by agent swept-a that no longer runs`).exec(cluster.headLog())?.[0]);
    assert.ok(line);
    assert.equal(existsSync(dir), false, "the killed agent's folder is gone");
    assert.ok((await dirOf("swept-b")).startsWith("/dev/shm/hearth-cache-swept-b-"), "the new agent's own cache stands");
  } finally {
    await cluster.stop();
  }
});
