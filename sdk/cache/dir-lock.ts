/**
 * A cross-process lock held by a live process: the lock is a directory that
 * holds `pid-<holder>`, made whole in a private place and renamed into
 * position, so no process ever sees a lock without its holder (a lock made by
 * mkdir and then filled had a window where another process read no pid, took
 * the holder for dead and removed the lock under it). A lock whose holder has
 * died is taken over.
 */
import { mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import path from "node:path";

let serial = 0;

/** Takes `lock` if it is free or its holder is dead; false while a live process holds it. */
export function tryLock(lock: string): boolean {
  const mine = `${lock}.new-${process.pid}-${serial++}`;
  mkdirSync(path.join(mine, `pid-${process.pid}`), { recursive: true, mode: 0o700 });
  try {
    renameSync(mine, lock);
    return true;
  } catch (e) {
    rmSync(mine, { recursive: true, force: true });
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "ENOTEMPTY" && code !== "EEXIST") throw e;
  }
  const holder = holderOf(lock);
  if (holder === undefined || alive(holder)) return false;
  // The holder died: move its lock aside (only one taker can) and check it was the dead one's.
  const stale = `${lock}.stale-${process.pid}-${serial++}`;
  try {
    renameSync(lock, stale);
  } catch {
    return false;
  }
  if (holderOf(stale) !== holder) {
    // A live process took the lock between the read and the move: give it back.
    try {
      renameSync(stale, lock);
    } catch {
      // It cannot go back (a third process holds the lock now); its holder's copy still lands whole (tmp + rename).
    }
    return false;
  }
  rmSync(stale, { recursive: true, force: true });
  return tryLock(lock);
}

/** Releases a lock this process holds. */
export function unlock(lock: string): void {
  if (holderOf(lock) !== process.pid) return;
  // Moved aside first: emptied in place, the lock would for a moment be an empty directory another taker's rename replaces.
  const old = `${lock}.old-${process.pid}-${serial++}`;
  renameSync(lock, old);
  rmSync(old, { recursive: true, force: true });
}

function holderOf(lock: string): number | undefined {
  try {
    const pid = Number(readdirSync(lock).find((n) => n.startsWith("pid-"))?.slice(4));
    return Number.isInteger(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}
