/**
 * Shipped folders (a model, a checkpoint, a trainer state), made readable on
 * a node from the node cache's own copies: a folder shipped as objects (one
 * object per file, or a few parts of one) becomes `<app dir>/folders/<id>`,
 * each file a hard link to the cached object's file (no second copy) or, for
 * a file in several parts or small ones, the parts written one after the
 * other. It is made once per node (concurrent executors share the build) and
 * appears whole or not at all (built under another name, then renamed);
 * executors read it in place, with the same permissions as the app's cached
 * objects. Their bytes count against the node cache's file limit once the
 * cache no longer holds them itself (`heldBytes`), and the least recently
 * opened folder goes when the cache needs room (it is made again on the next
 * open); the rest live until the agent stops (its cache dir is emptied when
 * the next one starts).
 */
import { closeSync, copyFileSync, existsSync, linkSync, lstatSync, mkdirSync, openSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { fileChunks, writeAllSync } from "../sdk/cache/file-io.js";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { HearthError } from "../sdk/errors/index.js";
import { isFilePart, userKey, type ObjectStore } from "./head/object-store.js";

/** One file of a folder to make: its name, its size and the object keys of its parts in order. */
export interface FolderEntry {
  name: string;
  size: number;
  parts: string[];
}

/** Checks an `obj-folder` request's id and entries. */
export function parseFolder(id: unknown, files: unknown): { id: string; files: FolderEntry[] } {
  if (typeof id !== "string" || !/^[0-9a-f]{8,64}$/.test(id)) throw new HearthError(`a folder id is 8-64 hex digits; got ${JSON.stringify(id)}`);
  if (!Array.isArray(files) || files.length > 100_000) throw new HearthError("a folder's files must be a list (at most 100 000)");
  return {
    id,
    files: files.map((f: { name?: unknown; size?: unknown; parts?: unknown }) => {
      const name = f?.name;
      if (typeof name !== "string" || name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0") || name.startsWith(".complete")) {
        throw new HearthError(`a folder file name is a plain name; got ${JSON.stringify(name)}`);
      }
      if (typeof f.size !== "number" || !Number.isSafeInteger(f.size) || f.size < 0) throw new HearthError(`file ${name}: size must be a byte count`);
      if (!Array.isArray(f.parts) || f.parts.some((k) => typeof k !== "string")) throw new HearthError(`file ${name}: parts must be object keys`);
      return { name, size: f.size, parts: f.parts as string[] };
    }),
  };
}

/** Builds folders from a store's copies, once per (app, id), and counts what they hold. */
export class NodeFolders {
  private readonly building = new Map<string, Promise<{ dir: string; built: boolean }>>();
  /** The folders made, by path, with when each was last opened (the least recently used goes first when room is needed). */
  private readonly made = new Map<string, number>();
  private clock = 0;

  constructor(
    private readonly store: ObjectStore,
    /** Brings `app/key` up to date in the store (the node cache's fetch). */
    private readonly refresh: (app: string, key: string) => Promise<void>,
    /** The app's folder of part files. */
    private readonly appDir: (app: string) => string,
  ) {}

  /** The folder `id` of `app` on this node, made from its objects if it is not there yet (`built`: by this call or one it joined). */
  open(app: string, id: string, files: FolderEntry[]): Promise<{ dir: string; built: boolean }> {
    const dir = path.join(this.appDir(app), "folders", id);
    if (existsSync(path.join(dir, ".complete"))) {
      this.made.set(dir, ++this.clock);
      return Promise.resolve({ dir, built: false });
    }
    const k = `${app}/${id}`;
    const running = this.building.get(k);
    if (running) return running.then((r) => ({ ...r, built: false }));
    const p = this.build(app, dir, files)
      .then((d) => ({ dir: d, built: true }))
      .finally(() => this.building.delete(k));
    this.building.set(k, p);
    return p;
  }

  private async build(app: string, dir: string, files: FolderEntry[]): Promise<string> {
    mkdirSync(path.dirname(dir), { recursive: true, mode: 0o750 });
    const tmp = `${dir}.building-${randomBytes(6).toString("hex")}`;
    mkdirSync(tmp, { mode: 0o750 });
    try {
      for (const f of files) {
        for (const key of f.parts) await this.refresh(app, key);
        await this.writeFile(app, path.join(tmp, f.name), f);
        const size = statSync(path.join(tmp, f.name)).size;
        if (size !== f.size) throw new HearthError(`${f.name} came out ${size} bytes, not the ${f.size} shipped`);
      }
      writeFileSync(path.join(tmp, ".complete"), "", { mode: 0o640 });
      rmSync(dir, { recursive: true, force: true });
      renameSync(tmp, dir);
      this.made.set(dir, ++this.clock);
      return dir;
    } catch (err) {
      rmSync(tmp, { recursive: true, force: true });
      throw err;
    }
  }

  /** One file: a hard link to its one cached part file, else its parts' bytes in order. */
  private async writeFile(app: string, target: string, f: FolderEntry): Promise<void> {
    const parts = f.parts.map((key) => {
      const r = this.store.read(`${app}/${key}`);
      if (r.mode !== "full" || r.parts.length !== 1) throw new HearthError(`part '${key}' of ${f.name} is not one stored part`);
      return { obj: r.object, part: r.parts[0]! };
    });
    if (parts.length === 1 && isFilePart(parts[0]!.part.size)) {
      const src = this.store.pathOf(parts[0]!.obj, parts[0]!.part);
      try {
        linkSync(src, target);
        return;
      } catch {
        copyFileSync(src, target); // another file system (or links refused): one copy more
        return;
      }
    }
    const fd = openSync(target, "w", 0o640);
    try {
      let at = 0;
      for (const { obj, part } of parts) {
        if (part.data) {
          writeAllSync(fd, part.data, at, target);
          at += part.data.byteLength;
          continue;
        }
        // Checked chunk by chunk on the way: a folder is made only of bytes that match their sums.
        let o = 0;
        for await (const chunk of fileChunks(this.store.pathOf(obj, part), part.size, part.sums, { key: userKey(obj.key), app })) {
          writeAllSync(fd, chunk, at + o, target);
          o += chunk.byteLength;
        }
        at += part.size;
      }
    } finally {
      closeSync(fd);
    }
  }

  /**
   * Bytes the folders hold that the store does not: a folder's file is a
   * hard link to a cached part, free while the part is cached, but once the
   * cache drops the part (evicted, replaced, deleted) the link keeps its
   * bytes on disk; a copied file always holds its own. Counted once per file
   * (inode), so the cache's limit bounds them too.
   */
  heldBytes(): number {
    if (this.made.size === 0) return 0;
    const inode = (f: string): string | undefined => {
      try {
        const st = lstatSync(f);
        return st.isFile() ? `${st.dev}:${st.ino}` : undefined;
      } catch {
        return undefined;
      }
    };
    const cached = new Set(this.store.partFiles().map(inode));
    const counted = new Set<string>();
    let bytes = 0;
    for (const dir of this.made.keys()) {
      let names: string[];
      try {
        names = readdirSync(dir);
      } catch {
        continue;
      }
      for (const name of names) {
        const f = path.join(dir, name);
        let st;
        try {
          st = lstatSync(f);
        } catch {
          continue;
        }
        const id = `${st.dev}:${st.ino}`;
        if (!st.isFile() || cached.has(id) || counted.has(id)) continue;
        counted.add(id);
        bytes += st.size;
      }
    }
    return bytes;
  }

  /** Removes the least recently opened folder (not one being built); false when there is none. */
  dropOne(): boolean {
    let oldest: string | undefined;
    for (const [dir, at] of this.made) if (oldest === undefined || at < this.made.get(oldest)!) oldest = dir;
    if (oldest === undefined) return false;
    this.made.delete(oldest);
    rmSync(oldest, { recursive: true, force: true });
    return true;
  }

  /** How many folders this node holds. */
  get count(): number {
    return this.made.size;
  }
}
