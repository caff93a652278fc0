/**
 * Where the copies of a publication land: memory-backed storage (a tmpfs,
 * `/dev/shm`) where the node has it and room for it, else disk.
 *
 * Every copy a publication makes is a new file, and on these machines a page
 * a process never had comes slowly, far more slowly on disk than in a tmpfs
 * (`dd` of a new 1 GiB file: 535 MB/s on ext4, 4.0 GB/s in /dev/shm with
 * freed pages to reuse). So the head's spool and the node caches go to
 * /dev/shm when the store's limit fits in both the tmpfs's free space and a
 * quarter of the machine's memory (a tmpfs holds its files in memory and
 * cannot write them back to disk under pressure: what the limit allows must
 * leave the processes room). Otherwise, and when asked, disk. `hearth
 * status` shows which one each store uses.
 */
import { accessSync, constants, existsSync, statfsSync } from "node:fs";
import os from "node:os";

/** What kind of storage a folder is on. */
export type MediumKind = "memory" | "disk";

/** `--cache-medium` / `--spool-medium`: pick one, or let hearth decide. */
export type MediumChoice = MediumKind | "auto";

/** Where a store puts its files, and why there. */
export interface Medium {
  kind: MediumKind;
  /** The folder the store's own folder goes under (or the folder itself, when named). */
  dir: string;
  why: string;
}

/** statfs types of memory-backed file systems: tmpfs and ramfs. */
const MEMORY_FS = new Set([0x01021994, 0x858458f6]);

/** The memory-backed folder hearth uses when it may. */
export const MEMORY_DIR = "/dev/shm";

/** Is `dir` (an existing folder) on memory-backed storage? */
export function isMemoryBacked(dir: string): boolean {
  try {
    return MEMORY_FS.has(Number(statfsSync(dir).type));
  } catch {
    return false;
  }
}

/** Bytes free for this user under `dir` (undefined when it cannot be told). */
export function freeBytes(dir: string): number | undefined {
  try {
    const s = statfsSync(dir);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return undefined;
  }
}

/**
 * Bytes a store may still add under `dir`: what its file system has free,
 * less a margin it leaves others (64 MiB, or a sixteenth of a small file
 * system); undefined when it cannot be told.
 */
export function roomOn(dir: string): number | undefined {
  try {
    const s = statfsSync(dir);
    const free = Number(s.bavail) * Number(s.bsize);
    const total = Number(s.blocks) * Number(s.bsize);
    return Math.max(0, free - Math.min(64 * 1024 * 1024, total / 16));
  } catch {
    return undefined;
  }
}

/** Parses `--cache-medium` / `--spool-medium`. */
export function parseMedium(flag: string, text: string): MediumChoice {
  if (text === "auto" || text === "memory" || text === "disk") return text;
  throw new Error(`${flag} must be auto, memory or disk; got '${text}'`);
}

/**
 * Chooses between MEMORY_DIR and `diskDir` for a store that holds up to
 * `limit` bytes of files (see the module doc). `choice` "memory" insists
 * (and fails when there is no tmpfs); "disk" never uses memory.
 */
export function pickMedium(choice: MediumChoice, limit: number, diskDir: string, memoryDir = MEMORY_DIR): Medium {
  if (choice === "disk") return { kind: "disk", dir: diskDir, why: "asked for disk" };
  const usable = existsSync(memoryDir) && isMemoryBacked(memoryDir) && writable(memoryDir);
  if (choice === "memory") {
    if (!usable) throw new Error(`memory-backed storage was asked for, but ${memoryDir} is not a writable tmpfs here`);
    return { kind: "memory", dir: memoryDir, why: "asked for memory" };
  }
  if (!usable) return { kind: "disk", dir: diskDir, why: `${memoryDir} is not a writable tmpfs here` };
  const free = freeBytes(memoryDir) ?? 0;
  const quarter = os.totalmem() / 4;
  if (limit > free) return { kind: "disk", dir: diskDir, why: `its limit (${gib(limit)}) is more than ${memoryDir} has free (${gib(free)})` };
  if (limit > quarter) return { kind: "disk", dir: diskDir, why: `its limit (${gib(limit)}) is more than a quarter of this machine's memory (${gib(quarter)}), which a tmpfs could not give back` };
  return { kind: "memory", dir: memoryDir, why: `its limit (${gib(limit)}) fits in ${memoryDir} (${gib(free)} free) and in a quarter of memory` };
}

function writable(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function gib(n: number): string {
  return `${(n / 2 ** 30).toFixed(1)} GiB`;
}
