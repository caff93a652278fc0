/**
 * The files of an object store (object-store.ts): where each part and each
 * manifest lives, how they reach the disk durably, and the spool folder of a
 * store without a data dir.
 *
 * Durability (a data dir promises that objects outlive the head): a part's
 * bytes are flushed (`fsync`) before the manifest that names them is
 * renamed into place, the manifest is flushed before the rename, and the
 * folder is flushed after it, so a power loss leaves the previous version or
 * the new one, whole. The flushes of data run off the event loop (libuv's
 * thread pool), where a slow disk cannot stall the head's other requests.
 *
 * A spool (no data dir) is a folder `hearth-spool-<pid>-<random>` under a
 * parent (memory-backed `/dev/shm` where the caller chose it): a head killed
 * with -9 leaves its spool behind, and the next store that opens a spool
 * under the same parent removes every spool of this user whose process is
 * gone, so a crash leaks nothing past the next start. A spool holds its
 * maker's stamp (pids.ts: pid, start, pid namespace and boot): a pid reused
 * by another process does not keep a dead head's spool, and a head of
 * another pid namespace sharing the parent (a container) is not taken for
 * dead.
 */
import { createHash } from "node:crypto";
import { closeSync, existsSync, fsyncSync, lstatSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import path from "node:path";
import { checkChunk, writeAll, writeAllSync } from "../../sdk/cache/file-io.js";
import { CHUNK } from "../../sdk/cache/transfer.js";
import { HearthError } from "../../sdk/errors/index.js";
import { isFilePart, objectIds, userKey, type ObjectMeta, type StoredObject } from "./stored-objects.js";
import { makerGone, stampFolder } from "../pids.js";

/** A spool folder's name: the pid of the process that made it, then mkdtemp's random tail. */
const SPOOL_PREFIX = "hearth-spool-";

/** The name of `key`'s files (a hash: keys are any text). */
export function keyHash(key: string): string {
  return createHash("sha256").update(key).digest("hex").slice(0, 40);
}

/** Flushes `file`'s bytes to the disk, off the event loop. */
export async function syncFileAsync(file: string): Promise<void> {
  const fh = await open(file, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Writes `data` to a new `file` (every byte: writeAll) and, with `sync`, flushes it; off the event loop. */
export async function writeFileDurable(file: string, data: Uint8Array, sync: boolean): Promise<void> {
  const fh = await open(file, "w", 0o600);
  try {
    await writeAll(fh.fd, data, 0, file);
    if (sync) await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Writes `data` to a new `file` (every byte) and, with `sync`, flushes it. */
export function writeFileDurableSync(file: string, data: Uint8Array, sync: boolean): void {
  const fd = openSync(file, "w", 0o600);
  try {
    writeAllSync(fd, data, 0, file);
    if (sync) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Flushes a folder's entries (renames, new and removed files) to the disk. */
export function syncDirSync(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** syncDirSync, off the event loop. */
export async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, "r");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** A small part's bytes from its file, checked against its sums (ObjectCorruptError names the file). */
export function readSmallPart(file: string, size: number, sums: number[] | undefined, key: string, part: number): Buffer {
  const data = readFileSync(file);
  if (data.byteLength !== size) throw new HearthError(`${file} (part ${part} of '${userKey(key)}') holds ${data.byteLength} bytes, not ${size}`);
  for (let at = 0; at < size; at += CHUNK) checkChunk(data.subarray(at, Math.min(at + CHUNK, size)), at, sums, { ...objectIds(key), part, source: file });
  return data;
}

/** Removes files no manifest names any more; one that will not go is left (it is never read, and a restart ignores it). */
export function removeFiles(files: string[]): void {
  for (const f of files) {
    try {
      rmSync(f, { force: true });
    } catch {
      // Unreferenced.
    }
  }
}


/**
 * Removes the spools under `parent` that this user's processes left and
 * that no live process holds (the pid in the name is gone); returns what it
 * removed. A folder of another user, or a link, is never touched.
 */
export function sweepSpools(parent: string): string[] {
  const removed: string[] = [];
  const uid = process.geteuid?.() ?? -1;
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return removed;
  }
  for (const name of names) {
    const m = new RegExp(`^${SPOOL_PREFIX}(\\d+)-`).exec(name);
    if (!m || Number(m[1]) === process.pid) continue;
    const dir = path.join(parent, name);
    try {
      const st = lstatSync(dir);
      if (!st.isDirectory() || st.uid !== uid || !makerGone(dir, Number(m[1]))) continue;
      rmSync(dir, { recursive: true, force: true });
      removed.push(dir);
    } catch {
      // Gone meanwhile, or not ours to remove.
    }
  }
  return removed;
}

/** Makes this process's spool under `parent` (after sweeping the spools dead processes left there). */
export function makeSpool(parent: string): { dir: string; swept: string[] } {
  mkdirSync(parent, { recursive: true, mode: 0o700 });
  const swept = sweepSpools(parent);
  const dir = mkdtempSync(path.join(parent, `${SPOOL_PREFIX}${process.pid}-`));
  stampFolder(dir);
  return { dir, swept };
}

/** A patch's file in `dir`. */
export function patchFileIn(dir: string, key: string, version: number): string {
  return path.join(dir, `${keyHash(key)}.${version}.patch`);
}

/** A base's files carry its version (and part index past the first), so writing a new base never touches the one the metadata on disk names. */
export function baseFileIn(dir: string, key: string, baseVersion: number, index = 0): string {
  return path.join(dir, `${keyHash(key)}.${baseVersion}.base${index === 0 ? "" : `.${index}`}`);
}

/**
 * The objects a data dir's metadata files name whose base files are whole
 * (a large part whose file is missing or short, a disk that lost it, is not
 * served as if it were whole); base files of the layout before they carried
 * their version are renamed on the way. A torn or foreign file is skipped.
 */
export function readStoredIndex(dir: string): StoredObject[] {
  const out: StoredObject[] = [];
  for (const f of readdirSync(dir)) {
    if (!f.endsWith(".json")) continue;
    try {
      const meta = JSON.parse(readFileSync(path.join(dir, f), "utf8")) as ObjectMeta;
      const base = baseFileIn(dir, meta.key, meta.baseVersion);
      const unversioned = path.join(dir, `${keyHash(meta.key)}.base`);
      if (!existsSync(base) && existsSync(unversioned)) renameSync(unversioned, base);
      if (!existsSync(base)) continue;
      const more = meta.more ?? [];
      const whole = [meta.base, ...more].every((p, i) => !isFilePart(p.size) || (existsSync(baseFileIn(dir, meta.key, meta.baseVersion, i)) && statSync(baseFileIn(dir, meta.key, meta.baseVersion, i)).size === p.size));
      if (!whole) continue;
      out.push({ ...meta, more, lastUsed: 0, readers: 0 });
    } catch {
      // A torn or foreign file: skip it rather than refuse to start.
    }
  }
  return out;
}
