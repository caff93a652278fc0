/**
 * The node cache's folder (`hearth agent --cache-dir`), claimed safely.
 *
 * A cache empties its folder when it starts (what a killed agent left there
 * is not known to be whole) and removes it when it stops. Done to whatever
 * folder the flag names, that deleted users' data (`--cache-dir ~/data`), and
 * under a world-writable parent (the help suggested `/dev/shm/hearth`) the
 * delete-then-create left a window in which another local user could make
 * the folder, or a link, that the agent (as root) then chowned and wrote
 * through. So, as `--executor-dir` does (executor-users.ts):
 *
 * - hearth empties and removes only what it made: a folder it created, or an
 *   empty one it took over, carries a marker file (`.hearth-node-cache`); a
 *   folder without it that holds anything is refused, untouched;
 * - the folder is made with one `mkdir` (no delete before it), and then must
 *   be a real folder (not a link), owned by the agent's user and writable by
 *   no one else, inside parents that no other user can swap it out of
 *   (owned by root or the agent's user, and sticky where others may write);
 * - a marker held by a live process (another agent on the same folder) is
 *   refused too.
 *
 * An agent killed for good (kill -9, a Slurm job's end) leaves its folder,
 * and on /dev/shm that is memory held until reboot that no later agent
 * claims (the next job's agents have other ids). So an agent starting where
 * agents' default folders lie side by side removes the ones whose marker
 * names a process certainly gone (sweepDeadCaches): the marker says when
 * its process started and in which pid namespace and boot, as a pid alone
 * can be reused or name another container's process. A sweep moves such a
 * folder aside with one rename before removing it, and gives it back if the
 * moved folder's marker is no longer the dead one (an agent of that id took
 * it over in between); a claim that loses its folder to that move starts
 * over.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, closeSync, lstatSync, mkdirSync, openSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, rmdirSync, writeSync } from "node:fs";
import path from "node:path";
import { UsageError } from "../sdk/errors/index.js";
import { parseStamp, processAlive, sameStamp, selfStamp, stampState, type ProcessStamp } from "./pids.js";

/** The file that says hearth made (or took over) a cache folder. */
export const CACHE_MARKER = ".hearth-node-cache";

/** A cache folder this agent holds. */
export interface CacheDirClaim {
  dir: string;
  /** hearth created the folder (it goes at release); else it took over an empty one (the folder stays). */
  created: boolean;
  /** What the claim removed that a previous agent left (bytes of files, count of entries). */
  leftover: { entries: number; bytes: number };
}

interface Marker extends ProcessStamp {
  agent: string;
  created: boolean;
}

function refuse(dir: string, why: string, what: string): never {
  throw new UsageError(`--cache-dir ${dir}: ${why}; ${what}`, { flag: "--cache-dir" });
}


/** Refuses a folder's parents that a user other than root or this one could rename or replace it in. */
function checkParents(dir: string, euid: number): void {
  for (let p = realpathSync(path.dirname(dir)); ; p = path.dirname(p)) {
    const st = lstatSync(p);
    const sticky = (st.mode & 0o1000) !== 0;
    if (st.uid !== 0 && st.uid !== euid) refuse(dir, `its parent ${p} belongs to uid ${st.uid}, who could swap the folder for another`, "name a folder under one that is yours or root's");
    if ((st.mode & 0o022) !== 0 && !sticky) refuse(dir, `its parent ${p} is writable by others (mode 0${(st.mode & 0o7777).toString(8)}) and not sticky, so anyone could swap the folder for a link`, "name a folder under one only you can write, or a sticky one such as /tmp or /dev/shm");
    if (p === path.dirname(p)) return;
  }
}

/** Bytes and count of what lies under `dir` (not following links), the marker left out. */
function measure(dir: string): { entries: number; bytes: number } {
  let entries = 0;
  let bytes = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === CACHE_MARKER) continue;
    entries++;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      const inner = measure(p);
      entries += inner.entries;
      bytes += inner.bytes;
    } else if (e.isFile()) bytes += lstatSync(p).size;
  }
  return { entries, bytes };
}

/** Removes everything in a claimed folder but the marker (it is ours and only its owner can write it: no race). */
function empty(dir: string): void {
  for (const name of readdirSync(dir)) if (name !== CACHE_MARKER) rmSync(path.join(dir, name), { recursive: true, force: true });
}

/** Writes the marker whole (a temporary file, then a rename). */
function writeMarker(dir: string, marker: Marker): void {
  const tmp = path.join(dir, `${CACHE_MARKER}.${process.pid}.tmp`);
  const fd = openSync(tmp, "wx", 0o600);
  try {
    writeSync(fd, JSON.stringify(marker));
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path.join(dir, CACHE_MARKER));
}

function readMarker(dir: string): Marker | undefined {
  const file = path.join(dir, CACHE_MARKER);
  let st;
  try {
    st = lstatSync(file);
  } catch {
    return undefined;
  }
  if (!st.isFile()) refuse(dir, `${CACHE_MARKER} in it is not a file`, "remove it, or name another folder");
  try {
    const m = JSON.parse(readFileSync(file, "utf8")) as Partial<Marker>;
    return { agent: String(m.agent ?? "?"), created: m.created === true, ...parseStamp(m) };
  } catch {
    return { agent: "?", pid: 0, created: false }; // a torn marker is still hearth's
  }
}

/**
 * Claims `dir` for agent `agent`'s node cache (see the module doc): makes
 * it, or takes over one hearth made before (emptying what a killed agent
 * left) or an empty one. Throws UsageError saying what is wrong and what to
 * do, having changed nothing.
 */
export function claimCacheDir(dir: string, agent: string): CacheDirClaim {
  for (let attempt = 1; ; attempt++) {
    try {
      return claimOnce(dir, agent);
    } catch (err) {
      // Another agent's sweep moved the folder aside under this claim (see the module doc): claim again.
      if (attempt >= 3 || err instanceof UsageError || (err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
  }
}

function claimOnce(dir: string, agent: string): CacheDirClaim {
  const euid = process.geteuid?.() ?? -1;
  dir = path.resolve(dir);
  mkdirSync(path.dirname(dir), { recursive: true, mode: 0o755 });
  checkParents(dir, euid);
  let created = true;
  try {
    mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    created = false;
  }
  const st = lstatSync(dir);
  if (st.isSymbolicLink()) refuse(dir, "it is a symbolic link", "name the folder itself");
  if (!st.isDirectory()) refuse(dir, "it is not a folder", "name a folder");
  if (st.uid !== euid) refuse(dir, `it belongs to uid ${st.uid}, not to this agent's user (${euid})`, "name a folder this user owns, or a new one");
  if ((st.mode & 0o022) !== 0) refuse(dir, `it is writable by others (mode 0${(st.mode & 0o7777).toString(8)})`, "remove their write permission, or name a new folder");
  let leftover = { entries: 0, bytes: 0 };
  if (!created) {
    const marker = readMarker(dir);
    if (marker) {
      const state = marker.pid === process.pid || marker.pid <= 0 ? "gone" : stampState(marker);
      if (state === "alive" || (state === "unknown" && processAlive(marker.pid))) refuse(dir, `agent ${marker.agent} (pid ${marker.pid}) holds it`, "give each agent its own --cache-dir");
      created = marker.created;
      leftover = measure(dir);
      empty(dir);
    } else {
      const names = readdirSync(dir);
      if (names.length > 0) {
        const shown = names.slice(0, 5).map((n) => JSON.stringify(n)).join(", ");
        refuse(dir, `it holds ${names.length} entr${names.length === 1 ? "y" : "ies"} hearth did not make (${shown}${names.length > 5 ? ", …" : ""}), and a cache empties its folder`, "name a new or empty folder; nothing in this one was touched");
      }
    }
  }
  writeMarker(dir, { agent, created, ...selfStamp() });
  // Traversable, not listable, by the apps' own users when executors run as them (it is ours: checked above).
  chmodSync(dir, 0o711);
  return { dir, created, leftover };
}

/**
 * Gives a claimed folder back: removes what hearth put there, the marker
 * last, and the folder itself if hearth created it.
 */
export function releaseCacheDir(claim: CacheDirClaim): void {
  const marker = readMarker(claim.dir);
  if (!marker || marker.pid !== process.pid) return; // another agent took it over after this one was presumed dead
  empty(claim.dir);
  rmSync(path.join(claim.dir, CACHE_MARKER), { force: true });
  if (claim.created) rmdirSync(claim.dir);
}

/** Names a sweep gives the folders it moves aside to remove (never a cache folder's own). */
const SWEPT_PREFIX = ".hearth-swept-";

/** A folder a sweep removed. */
export interface SweptCache {
  dir: string;
  /** The agent its marker named. */
  agent: string;
  entries: number;
  bytes: number;
}

/**
 * Removes the cache folders under `parent` whose names match `names`
 * (agents' default folders) and whose marker names a process certainly
 * gone (see the module doc); never `keep` (this agent's own), a folder of
 * another user, a link, one without a marker (it may be being made) or one
 * whose marker's process may be alive or is of another pid namespace or
 * boot. Also removes what a sweep killed mid-way left moved aside (a
 * minute old, its sweeper gone). Returns what it removed.
 */
export function sweepDeadCaches(parent: string, names: RegExp, keep: string, hooks: { beforeMove?: (dir: string) => void } = {}): SweptCache[] {
  const swept: SweptCache[] = [];
  const euid = process.geteuid?.() ?? -1;
  let entries: string[];
  try {
    entries = readdirSync(parent);
  } catch {
    return swept;
  }
  for (const name of entries) {
    const dir = path.join(parent, name);
    try {
      const st = lstatSync(dir);
      if (!st.isDirectory() || st.uid !== euid) continue;
      if (name.startsWith(SWEPT_PREFIX)) {
        const sweeper = Number(name.slice(SWEPT_PREFIX.length).split("-")[0]);
        if (Date.now() - st.ctimeMs > 60_000 && !processAlive(sweeper)) rmSync(dir, { recursive: true, force: true });
        continue;
      }
      if (!names.test(name) || path.resolve(dir) === path.resolve(keep)) continue;
      const marker = readMarker(dir);
      if (!marker || stampState(marker) !== "gone") continue;
      hooks.beforeMove?.(dir);
      const aside = path.join(parent, `${SWEPT_PREFIX}${process.pid}-${randomBytes(6).toString("hex")}`);
      renameSync(dir, aside);
      const moved = readMarker(aside);
      if (!moved || !sameStamp(moved, marker)) {
        try {
          renameSync(aside, dir); // an agent of that id took it over between the look and the move: it is its
          continue;
        } catch {
          // That agent's claim started over in a new folder there: the one moved aside is no one's.
        }
      }
      const size = measure(aside);
      rmSync(aside, { recursive: true, force: true });
      swept.push({ dir, agent: marker.agent, ...size });
    } catch {
      // Gone meanwhile, or not a folder hearth can judge: left.
    }
  }
  return swept;
}
