/**
 * Each executor's own temp folder (its TMPDIR), removed when it exits and,
 * for an agent killed with -9, when the next agent starts.
 *
 * What an executor leaves in the temp folder when it dies is nobody's: a
 * weights publisher's scratch of shard files (a full publication, 942 MiB at
 * the 0.5B shape), a sync's downloads, a trainer's save in progress. Under
 * the shared `$TMPDIR` those leaked with every executor killed mid-work. So
 * the agent gives each executor a folder of its own and removes it after the
 * executor's exit, and a starting agent removes every such folder under its
 * work dir (the executors of a dead agent exit on their own: nothing of
 * theirs is in use).
 *
 * The folder is `<work-dir>/tmp/p<agent pid>/<executor id>`, or where
 * executors run as their app's own user (executor-users.ts)
 * `<executor-dir>/u<uid>/tmp/p<agent pid>/<executor id>`: root's `tmp` and
 * `p<pid>` (group the app's, 0750), the executor's folder the app's user's
 * (0700). The agent's pid in the path keeps agents that share a folder
 * apart: a starting agent removes only the folders of agents that are gone
 * (by the stamp `p<pid>` holds, pids.ts: a reused pid or another pid
 * namespace does not fool it). The agent
 * never deletes recursively as root inside a folder an executor could write
 * (a link swapped in mid-walk would aim the delete elsewhere): it empties it
 * as the app's user (`rm` run with that uid), then removes the empty folder.
 */
import { spawn } from "node:child_process";
import { chmodSync, chownSync, lstatSync, mkdirSync, readdirSync, rmSync, rmdirSync } from "node:fs";
import path from "node:path";
import type { ExecutorIdentity } from "./executor-users.js";
import { makerGone, OWNER_FILE, stampFolder } from "./pids.js";

/** A folder made for one executor, and who may empty it. */
export interface ScratchDir {
  dir: string;
  /** The app's user and group, when executors run as them (the folder is emptied as them). */
  owner?: { uid: number; gid: number };
}

/** The folder of this agent's executors' temp folders under `parent`. */
function agentFolder(parent: string): string {
  return path.join(parent, `p${process.pid}`);
}

/** Makes executor `id`'s temp folder: under the agent's work dir, or (per-app users) under the app's folder. */
export function makeScratch(workDir: string, id: string, identity?: ExecutorIdentity): ScratchDir {
  if (!identity) {
    const mine = agentFolder(path.join(workDir, "tmp"));
    const dir = path.join(mine, id);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    stampFolder(mine);
    return { dir };
  }
  // Root's, inside root's u<uid> folder: the app's user can reach its own folder here, and change nothing else.
  const tmp = path.join(identity.root, "tmp");
  const mine = agentFolder(tmp);
  for (const d of [tmp, mine]) {
    mkdirSync(d, { recursive: true, mode: 0o750 });
    if (!lstatSync(d).isDirectory()) throw new Error(`${d} must be a folder`);
    chownSync(d, 0, identity.gid);
    chmodSync(d, 0o750);
  }
  stampFolder(mine, 0o640);
  const dir = path.join(mine, id);
  mkdirSync(dir, { mode: 0o700 });
  chownSync(dir, identity.uid, identity.gid);
  return { dir, owner: { uid: identity.uid, gid: identity.gid } };
}

/**
 * Removes a temp folder: at once when it is the agent's own; else emptied as
 * its owner, then the empty folder removed. Resolves with what went wrong,
 * or undefined.
 */
export async function removeScratch(s: ScratchDir): Promise<string | undefined> {
  if (!s.owner) {
    rmSync(s.dir, { recursive: true, force: true });
    return undefined;
  }
  const { uid, gid } = s.owner;
  // `find -mindepth 1 -delete` as the app's user: it can remove only what that user could.
  const emptied = await new Promise<string | undefined>((resolve) => {
    const p = spawn("find", [s.dir, "-xdev", "-mindepth", "1", "-delete"], { uid, gid, cwd: "/", stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    p.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    p.on("error", (e) => resolve(e.message));
    p.on("exit", (code) => resolve(code === 0 ? undefined : `find exited ${code}: ${err.trim().slice(0, 200)}`));
  });
  try {
    rmdirSync(s.dir);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "ENOENT") return emptied ?? `${s.dir} could not be removed (${code})`;
  }
  return emptied;
}


/** The entries of `dir` (none if it cannot be read), its owner's stamp left out. */
function list(dir: string): string[] {
  try {
    return readdirSync(dir).filter((n) => n !== OWNER_FILE);
  } catch {
    return [];
  }
}

/** The `p<pid>` folders under `tmp` whose agent is gone (never this one's). */
function deadAgents(tmp: string): string[] {
  return list(tmp).filter((n) => {
    const m = /^p(\d+)$/.exec(n);
    return m !== null && Number(m[1]) !== process.pid && makerGone(path.join(tmp, n), Number(m[1]));
  });
}

/**
 * The temp folders that agents which are gone left for their executors
 * (under `workDir`, and for per-app users under each app's folder of
 * `executorDir`), each for removeScratch, then its agent's folder (empty by
 * then) to remove.
 */
export function leftScratch(workDir: string, executorDir?: string): Array<{ agentDir: string; dirs: ScratchDir[] }> {
  const found: Array<{ agentDir: string; dirs: ScratchDir[] }> = [];
  const tmp = path.join(workDir, "tmp");
  for (const a of deadAgents(tmp)) found.push({ agentDir: path.join(tmp, a), dirs: list(path.join(tmp, a)).map((n) => ({ dir: path.join(tmp, a, n) })) });
  if (executorDir) {
    for (const app of list(executorDir)) {
      const m = /^u(\d+)$/.exec(app);
      if (!m) continue;
      const uid = Number(m[1]);
      const appTmp = path.join(executorDir, app, "tmp");
      for (const a of deadAgents(appTmp)) {
        const dirs: ScratchDir[] = [];
        for (const n of list(path.join(appTmp, a))) {
          const dir = path.join(appTmp, a, n);
          try {
            const st = lstatSync(dir);
            // Only a folder of that app's user: anything else there is not an executor's temp folder.
            if (st.isDirectory() && st.uid === uid) dirs.push({ dir, owner: { uid, gid: st.gid } });
          } catch {
            // gone
          }
        }
        found.push({ agentDir: path.join(appTmp, a), dirs });
      }
    }
  }
  return found;
}

/** Removes what `leftScratch` found; returns how many executors' folders went and what could not. */
export async function sweepScratch(workDir: string, executorDir?: string): Promise<{ removed: number; failed: string[] }> {
  let removed = 0;
  const failed: string[] = [];
  for (const { agentDir, dirs } of leftScratch(workDir, executorDir)) {
    for (const d of dirs) {
      const err = await removeScratch(d);
      if (err) failed.push(err);
      else removed++;
    }
    try {
      rmSync(path.join(agentDir, OWNER_FILE), { force: true }); // root's (or the agent's), in a folder only it writes
      rmdirSync(agentDir);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") failed.push(`${agentDir}: ${(e as NodeJS.ErrnoException).code}`);
    }
  }
  return { removed, failed };
}
