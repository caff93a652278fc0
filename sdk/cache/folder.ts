/**
 * Folders (model checkpoints, trainer state) shipped to executors without
 * ever becoming one object or one buffer. A folder is described by its files'
 * names, sizes and modification times. Executors on the driver's host read it
 * in place; elsewhere each file travels as cache objects (streamed from the
 * file: one object per file by default, or parts of `partBytes`), and the
 * node cache makes the folder from its own copies of them (one copy per
 * node: its files are hard links to the cached objects), which the node's
 * executors read in place. A client without a node cache writes the files
 * where it is told (`fetchFolder`), a chunk at a time.
 */
import { createHash } from "node:crypto";
import { accessSync, closeSync, constants, existsSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { HearthError, TimeoutError } from "../errors/index.js";
import { tryLock, unlock } from "./dir-lock.js";
import { fromFile, type ObjectCache, type ObjectRef } from "./object-cache.js";

/** Bytes per cache object of a shipped file: objects stream, so a file of any size is one object by default. */
export const PART_BYTES = Number.MAX_SAFE_INTEGER;

/** One file of a shipped folder. */
export interface FolderFile {
  name: string;
  size: number;
  mtimeMs: number;
  /** Its parts in order, when the folder travels as objects. */
  parts?: ObjectRef[];
}

/** A folder as executors receive it (small: it rides in any call). */
export interface FolderRef {
  /** The host the folder is on (os.hostname() of the driver). */
  host: string;
  /** Its absolute path there. */
  dir: string;
  files: FolderFile[];
  /** Identifies this content (host, path, names, sizes, times): the name of its node-local copy. */
  id: string;
  /** Executors that can see the folder may read it in place (false forces the objects, e.g. to test that path). */
  inPlaceOk: boolean;
}

/** Options of `shipFolder`. */
export interface ShipFolderOptions {
  /** Put every file as cache objects (needed when an executor cannot see the folder). */
  objects: boolean;
  /** Only these files (default every plain file of the folder). */
  names?: string[];
  /** Bytes per object (tests make small parts). */
  partBytes?: number;
  /** With `objects`: executors use the objects even when they could read the folder in place. */
  forceObjects?: boolean;
}

/** Describes `dir` and, with `objects`, puts its files part by part. */
export async function shipFolder(objects: ObjectCache, dir: string, opts: ShipFolderOptions): Promise<FolderRef> {
  const abs = path.resolve(dir);
  const names = opts.names ?? readdirSync(abs).filter((n) => statSync(path.join(abs, n)).isFile()).sort();
  const partBytes = opts.partBytes ?? PART_BYTES;
  const files: FolderFile[] = [];
  for (const name of names) {
    if (name.includes("/") || name.includes("\\") || name === ".." || name === ".") throw new HearthError(`cannot ship '${name}' from ${abs}: a file name, not a path, is expected`);
    const st = statSync(path.join(abs, name));
    const file: FolderFile = { name, size: st.size, mtimeMs: st.mtimeMs };
    if (opts.objects) file.parts = await putParts(objects, path.join(abs, name), st.size, partBytes);
    files.push(file);
  }
  // The content's identity (where it is on the driver's host, names, sizes, times), not the objects':
  // a node that already copied this folder for an earlier run reuses its copy.
  const id = createHash("sha256")
    .update(JSON.stringify([os.hostname(), abs, files.map((f) => [f.name, f.size, f.mtimeMs])]))
    .digest("hex")
    .slice(0, 24);
  return { host: os.hostname(), dir: abs, files, id, inPlaceOk: !(opts.objects && opts.forceObjects) };
}

async function putParts(objects: ObjectCache, file: string, size: number, partBytes: number): Promise<ObjectRef[]> {
  const parts: ObjectRef[] = [];
  for (let at = 0; at < size || (size === 0 && parts.length === 0); at += partBytes) {
    // Streamed from the file; scratch: dropFolder deletes them once the folder is read, and if the shipper vanishes first, the head does with the app.
    parts.push(await objects.put(fromFile(file, { offset: at, length: Math.min(partBytes, size - at) }), { scratch: true }));
    if (size === 0) break;
  }
  return parts;
}

/**
 * Can this process read the folder where the driver described it (same host, same sizes and times, and
 * readable by this process's user: an executor running as its app's own user may not read the driver's files)?
 */
export function visibleInPlace(ref: FolderRef, host = os.hostname()): boolean {
  if (host !== ref.host) return false;
  return ref.files.every((f) => {
    const p = path.join(ref.dir, f.name);
    if (!existsSync(p) || !canAccess(p, constants.R_OK)) return false;
    const st = statSync(p);
    return st.size === f.size && st.mtimeMs === f.mtimeMs;
  });
}

/** Where an executor found a shipped folder. */
export interface OpenedFolder {
  dir: string;
  /** Read where the driver has it. */
  inPlace: boolean;
  /** Bytes this call fetched from the cache (0 when read in place or already on this node). */
  fetchedBytes: number;
}

/** Options of `openFolder`. */
export interface OpenFolderOptions {
  /** Root of the node-local copies (default `<tmpdir>/hearth-folders`). */
  cacheRoot?: string;
  /** Longest wait for another executor of this node that is writing the same folder (default 30 min). */
  waitMs?: number;
}

/**
 * Makes a shipped folder readable here: in place when visible; on an
 * executor, the folder its node cache makes from its own copies of the
 * objects (once per node); else a copy under `cacheRoot` (written by the
 * first process that needs it, under a lock; the others wait for it).
 */
export async function openFolder(objects: ObjectCache, ref: FolderRef, opts: OpenFolderOptions = {}): Promise<OpenedFolder> {
  if (ref.inPlaceOk && visibleInPlace(ref)) return { dir: ref.dir, inPlace: true, fetchedBytes: 0 };
  if (ref.files.some((f) => !f.parts)) {
    throw new HearthError(
      `${ref.dir} (on ${ref.host}) is not readable from ${os.hostname()} and was shipped without its files: ship it with objects (modelTransfer "objects")`,
    );
  }
  const onNode = await objects.nodeFolder(ref.id, ref.files.map((f) => ({ name: f.name, size: f.size, parts: f.parts!.map((p) => p.key) })));
  if (onNode !== undefined) return { dir: onNode.dir, inPlace: false, fetchedBytes: onNode.built ? ref.files.reduce((n, f) => n + f.size, 0) : 0 };
  const root = opts.cacheRoot ?? path.join(os.tmpdir(), "hearth-folders");
  const dir = path.join(root, ref.id);
  const done = path.join(dir, ".complete");
  mkdirSync(root, { recursive: true, mode: 0o700 });
  const deadline = Date.now() + (opts.waitMs ?? 30 * 60_000);
  for (;;) {
    if (existsSync(done)) return { dir, inPlace: false, fetchedBytes: 0 };
    const lock = `${dir}.lock`;
    if (tryLock(lock)) {
      try {
        const fetchedBytes = await fetchInto(objects, ref, dir);
        return { dir, inPlace: false, fetchedBytes };
      } finally {
        unlock(lock);
      }
    }
    if (Date.now() > deadline) throw new TimeoutError(`waited ${Math.round((opts.waitMs ?? 1_800_000) / 1000)} s for another executor to copy ${ref.dir} into ${dir}; remove ${lock} if no executor is copying`, { op: "open-folder" });
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function fetchInto(objects: ObjectCache, ref: FolderRef, dir: string): Promise<number> {
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const bytes = await fetchFolder(objects, ref, tmp);
  writeFileSync(path.join(tmp, ".complete"), ref.dir, { mode: 0o600 });
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return bytes;
}

/** Writes a folder shipped as objects into `target` (made if missing), a chunk at a time; returns the bytes fetched. */
export async function fetchFolder(objects: ObjectCache, ref: FolderRef, target: string): Promise<number> {
  mkdirSync(target, { recursive: true, mode: 0o700 });
  let bytes = 0;
  for (const f of ref.files) {
    if (!f.parts) throw new HearthError(`${f.name} of ${ref.dir} was not shipped as objects`);
    const file = path.join(target, f.name);
    const fd = openSync(file, "w", 0o600);
    try {
      for (const part of f.parts) {
        for await (const chunk of objects.getStream(part)) {
          writeSync(fd, chunk);
          bytes += chunk.length;
        }
      }
    } finally {
      closeSync(fd);
    }
    if (statSync(file).size !== f.size) throw new HearthError(`${f.name} arrived with the wrong size (expected ${f.size} bytes)`);
  }
  return bytes;
}

/**
 * Can this process make and write `dir` (its nearest existing ancestor is a writable folder)? An executor
 * on the driver's host that runs as its app's own user usually cannot write where the driver asked.
 */
export function writableInPlace(dir: string): boolean {
  for (let p = path.resolve(dir); ; p = path.dirname(p)) {
    if (existsSync(p)) return statSync(p).isDirectory() && canAccess(p, constants.W_OK | constants.X_OK);
    if (path.dirname(p) === p) return false;
  }
}

function canAccess(p: string, mode: number): boolean {
  try {
    accessSync(p, mode);
    return true;
  } catch {
    return false;
  }
}

/** Deletes the objects of a shipped folder (no-op for one read in place). */
export async function dropFolder(objects: ObjectCache, ref: FolderRef): Promise<void> {
  for (const f of ref.files) for (const p of f.parts ?? []) await objects.delete(p.key);
}
