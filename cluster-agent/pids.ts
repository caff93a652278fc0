/**
 * Whether a process that left something behind (a spool, a cache folder's
 * marker, executors' temp folders) is still alive: a zombie (exited, not yet
 * reaped by its parent) is gone, and a process of another user still counts.
 */
import { readFileSync, readlinkSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";

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

/**
 * Who left a marker: a pid alone can be reused, and in another pid
 * namespace (a container sharing /dev/shm) it names another process, so a
 * marker also says when its process started and in which namespace.
 */
export interface ProcessStamp {
  pid: number;
  /** Its start, in clock ticks after boot (/proc/<pid>/stat field 22). */
  start?: number;
  /** Its pid namespace and the boot it ran in ("pid:[…] boot …"): a folder on a disk other machines share meets their stamps too. */
  ns?: string;
}

/** When process `pid` started (clock ticks after boot), or undefined where /proc does not say. */
export function startTicks(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 22; the name (field 2, in parentheses) may hold spaces, so count after its closing parenthesis.
    const start = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
    return Number.isSafeInteger(start) ? start : undefined;
  } catch {
    return undefined;
  }
}

let ownNamespace: string | undefined;

/** This process's pid namespace and boot ("pid:[…] boot <boot id>"), or undefined where /proc does not say. */
export function pidNamespace(): string | undefined {
  if (ownNamespace === undefined) {
    try {
      ownNamespace = `${readlinkSync("/proc/self/ns/pid")} boot ${readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()}`;
    } catch {
      return undefined;
    }
  }
  return ownNamespace;
}

/** A stamp as read from a file (what is missing or of the wrong type left out). */
export function parseStamp(s: Partial<ProcessStamp>): ProcessStamp {
  return { pid: Number(s.pid ?? 0), ...(typeof s.start === "number" ? { start: s.start } : {}), ...(typeof s.ns === "string" ? { ns: s.ns } : {}) };
}

/** Whether two stamps name the same process. */
export function sameStamp(a: ProcessStamp, b: ProcessStamp): boolean {
  return a.pid === b.pid && a.start === b.start && a.ns === b.ns;
}

/** This process's stamp. */
export function selfStamp(): ProcessStamp {
  return { pid: process.pid, start: startTicks(process.pid), ns: pidNamespace() };
}

/**
 * Whether the process a stamp names still runs: "gone" only when that is
 * certain (the stamp is from this pid namespace, and its pid is gone or now
 * names a process that started at another time); "unknown" for a stamp of
 * another namespace or one that does not say which.
 */
export function stampState(s: ProcessStamp): "alive" | "gone" | "unknown" {
  const ns = pidNamespace();
  if (s.ns === undefined || ns === undefined || s.ns !== ns) return "unknown";
  if (!processAlive(s.pid)) return "gone";
  if (s.start !== undefined && startTicks(s.pid) !== s.start) return "gone";
  return "alive";
}

/** The file in a folder a process made for itself (a spool, its executors' temp folders) that holds its stamp. */
export const OWNER_FILE = ".hearth-owner";

/** Writes this process's stamp into `dir` (whole: a temporary file, then a rename), replacing any there. */
export function stampFolder(dir: string, mode = 0o600): void {
  const tmp = path.join(dir, `${OWNER_FILE}.${process.pid}.tmp`);
  writeFileSync(tmp, JSON.stringify(selfStamp()), { mode });
  renameSync(tmp, path.join(dir, OWNER_FILE));
}

/**
 * Whether the process that made `dir` for itself is certainly gone: by the
 * stamp in it (stampState), or, in a folder from before stamps, by the pid
 * its name gives (`namedPid`) alone.
 */
export function makerGone(dir: string, namedPid: number): boolean {
  let stamp: ProcessStamp;
  try {
    const s = JSON.parse(readFileSync(path.join(dir, OWNER_FILE), "utf8")) as Partial<ProcessStamp>;
    stamp = parseStamp(s);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return !processAlive(namedPid);
    return false; // unreadable or torn: not known to be gone
  }
  return stamp.pid === namedPid && stampState(stamp) === "gone";
}
