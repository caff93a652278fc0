/**
 * Whether a process that left something behind (a spool, a cache folder's
 * marker, executors' temp folders) is still alive: a zombie (exited, not yet
 * reaped by its parent) is gone, and a process of another user still counts.
 */
import { readFileSync } from "node:fs";

/** True while process `pid` exists and has not exited. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return process.platform !== "linux"; // no /proc: trust kill(0)
  }
}
