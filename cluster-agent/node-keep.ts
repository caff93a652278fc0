/**
 * The files a writer on this node uploaded, kept as the node's copy.
 *
 * An executor that uploads a large object from files (a weights publisher's
 * shards) has every byte of it on this node already. Instead of the node
 * copying the object back from the head (or a peer) when its executors read
 * it, the writer hands the node each part's file as the head has it whole
 * (`obj-keep`); the node takes the file into its app folder (a hard link,
 * or, when the file lies on another file system than the cache dir, a local
 * copy) and checks every chunk against the sums the writer sent with it.
 * Once the write committed (`obj-kept`), the node fetcher installs the kept
 * files as the committed version after checking that the head's parts and
 * sums are exactly these (node-fetch.ts `adopt`). A kept upload that never
 * commits goes: the writer says so, or it expires when idle.
 *
 * The node trusts no path: a file is taken only when it is a regular file of
 * the user the app's executors run as (never a link to someone else's file),
 * and it becomes the agent's own (mode and group as the node's other files
 * of that app) before anyone can read it through the cache.
 */
import { chmodSync, chownSync, closeSync, constants, fstatSync, linkSync, lstatSync, openSync, rmSync } from "node:fs";
import { CHUNK, chunkSum, readChunk, writeAll } from "../sdk/cache/file-io.js";
import { HearthError } from "../sdk/errors/index.js";
import { isFilePart } from "./head/object-store.js";

/** One part a writer handed over: the node's file of it (a large part) or its bytes (a small one, kept in memory as the store keeps them), checked against `sums`. */
export interface KeptPart {
  file?: string;
  data?: Buffer;
  size: number;
  sums: number[];
  /** Settles once every chunk of the file was read back and matched its sum (rejects, naming the chunk, when one did not). */
  checked: Promise<void>;
}

/** A kept upload idle this long (its writer vanished before committing) is dropped with its files. */
export const KEPT_TTL_MS = 120_000;

/** Parts one kept upload may have (as an upload: object-service.ts). */
const MAX_KEPT_PARTS = 4096;

interface KeptUpload {
  parts: Map<number, KeptPart>;
  /** Bytes of its files (what it holds on the cache dir's file system until it is installed or dropped). */
  bytes: number;
  lastActive: number;
}

/** What KeptUploads needs from its node cache. */
export interface KeptUploadsOptions {
  /** A new file in `app`'s folder (the store's receivingFile). */
  fileFor: (app: string) => string;
  /** The user `app`'s executors run as: only their files are taken (undefined: not known, nothing is). */
  ownerOf: (app: string) => number | undefined;
  /** The group `app`'s files take on this node (undefined: the agent's own, files private). */
  groupOf: (app: string) => number | undefined;
  /** Mode of `app`'s part files. */
  fileMode: (app: string) => number;
  /** Bytes of files kept and not yet installed at most (the cache's file limit): past it a part is refused, and fetched later. */
  maxBytes: number;
}

/** The parts writers on this node handed over, by upload, until each upload commits or is dropped. */
export class KeptUploads {
  private readonly uploads = new Map<string, KeptUpload>();

  constructor(private readonly opts: KeptUploadsOptions) {}

  /**
   * Takes `file` as part `part` of upload `token` by app `app`: linked into
   * the app's folder (copied, each chunk checked, where linking cannot be
   * done), then read back whole and checked against `sums` (the sums the
   * head checked the chunks against as they arrived) while the writer goes
   * on (`checked`: the install waits for it). Resolves once the file may go
   * from the writer's folder. Throws, keeping nothing of it, when the file is
   * not the app's user's or is not `size` bytes.
   */
  async keep(app: string, token: string, part: number, file: string, size: number, sums: number[]): Promise<void> {
    if (!Number.isInteger(part) || part < 0 || part >= MAX_KEPT_PARTS) throw new HearthError(`obj-keep: part ${part} is out of range (0 to ${MAX_KEPT_PARTS - 1})`);
    if (!isFilePart(size)) throw new HearthError(`obj-keep: a part of ${size} bytes is kept in memory by the node; only file parts are kept`);
    if (sums.length !== Math.ceil(size / CHUNK) || !sums.every((s) => Number.isInteger(s))) throw new HearthError(`obj-keep: ${sums.length} chunk sums for ${size} bytes; one per ${CHUNK}-byte chunk`);
    if (this.bytes + size > this.opts.maxBytes) throw new HearthError(`obj-keep: ${size} more bytes would pass the ${this.opts.maxBytes} bytes of uploads this node may hold before their commit; not kept (the node fetches it when read)`);
    const target = this.opts.fileFor(app);
    let checked: Promise<void>;
    try {
      ({ checked } = await this.bring(app, file, target, size, sums));
    } catch (err) {
      rmSync(target, { force: true });
      throw err;
    }
    checked.catch(() => undefined); // awaited by the install; nobody may come
    this.add(app, token, part, { file: target, size, sums, checked });
  }

  /**
   * Takes `data` as small part `part` of upload `token` (a part the store
   * keeps in memory: the writer read its file and sent its bytes), after
   * they matched `sums`.
   */
  keepSmall(app: string, token: string, part: number, data: Buffer, sums: number[]): void {
    if (!Number.isInteger(part) || part < 0 || part >= MAX_KEPT_PARTS) throw new HearthError(`obj-keep: part ${part} is out of range (0 to ${MAX_KEPT_PARTS - 1})`);
    if (isFilePart(data.byteLength)) throw new HearthError(`obj-keep: a part of ${data.byteLength} bytes is a file part; hand over its file, not its bytes`);
    if (sums.length !== Math.ceil(data.byteLength / CHUNK)) throw new HearthError(`obj-keep: ${sums.length} chunk sums for ${data.byteLength} bytes; one per ${CHUNK}-byte chunk`);
    for (let at = 0; at < data.byteLength; at += CHUNK) checkSum(data.subarray(at, at + CHUNK), at, sums, `part ${part}`);
    this.add(app, token, part, { data, size: data.byteLength, sums, checked: Promise.resolve() });
  }

  private add(app: string, token: string, part: number, kept: KeptPart): void {
    const id = `${app}\0${token}`;
    const upload = this.uploads.get(id) ?? { parts: new Map<number, KeptPart>(), bytes: 0, lastActive: Date.now() };
    const before = upload.parts.get(part);
    if (before) {
      removeKept(before);
      upload.bytes -= before.file ? before.size : 0;
    }
    upload.parts.set(part, kept);
    upload.bytes += kept.file ? kept.size : 0;
    upload.lastActive = Date.now();
    this.uploads.set(id, upload);
  }

  /** The parts of upload `token`, in order, taken off this list (the caller installs or removes their files); undefined when it has none. */
  claim(app: string, token: string): KeptPart[] | undefined {
    const id = `${app}\0${token}`;
    const upload = this.uploads.get(id);
    if (!upload) return undefined;
    this.uploads.delete(id);
    const parts: KeptPart[] = [];
    for (let i = 0; i < upload.parts.size; i++) {
      const p = upload.parts.get(i);
      if (!p) {
        // Parts missing in the middle: not the object's every part, nothing to install.
        for (const q of upload.parts.values()) removeKept(q);
        return undefined;
      }
      parts.push(p);
    }
    return parts;
  }

  /** Drops upload `token` and its files (the write failed or was abandoned). */
  discard(app: string, token: string): void {
    for (const p of this.claim(app, token) ?? []) removeKept(p);
  }

  /** Bytes of kept files not yet installed (small parts' bytes are in memory, and not counted). */
  get bytes(): number {
    let n = 0;
    for (const u of this.uploads.values()) n += u.bytes;
    return n;
  }

  /** Drops uploads idle past KEPT_TTL_MS (a writer that died before it committed). */
  sweep(now: number): void {
    for (const [id, u] of this.uploads) {
      if (now - u.lastActive <= KEPT_TTL_MS) continue;
      this.uploads.delete(id);
      for (const p of u.parts.values()) removeKept(p);
    }
  }

  /** Drops every kept upload (the node cache is closing). */
  close(): void {
    for (const u of this.uploads.values()) for (const p of u.parts.values()) removeKept(p);
    this.uploads.clear();
  }

  /** Brings `file` to `target` as the agent's file of `app`; resolves with its check (still running after a link, done after a copy). */
  private async bring(app: string, file: string, target: string, size: number, sums: number[]): Promise<{ checked: Promise<void> }> {
    const owner = this.opts.ownerOf(app);
    if (owner === undefined) throw new HearthError(`obj-keep: the user app '${app}''s executors run as is not known here; nothing kept`);
    let linked = false;
    try {
      // link(2) does not follow a link the path ends in: what is linked is the inode the name is.
      linkSync(file, target);
      linked = true;
    } catch (err) {
      // Another file system (the cache dir on memory, the writer's scratch on disk): a local copy.
      if ((err as NodeJS.ErrnoException).code !== "EXDEV") throw new HearthError(`obj-keep: cannot take ${file}: ${(err as Error).message}`, { cause: err });
    }
    if (linked) {
      const st = lstatSync(target);
      if (!st.isFile() || st.uid !== owner) throw new HearthError(`obj-keep: ${file} is not a regular file of uid ${owner} (the app's executors' user); nothing kept`);
      if (st.size !== size) throw new HearthError(`obj-keep: ${file} has ${st.size} bytes, not the ${size} the head received; nothing kept`);
      this.own(app, target);
      return { checked: checkFile(target, size, sums) };
    }
    await this.copy(app, file, target, owner, size, sums);
    return { checked: Promise.resolve() };
  }

  /** A checked local copy of `file` (opened without following a link, and only if it is `owner`'s). */
  private async copy(app: string, file: string, target: string, owner: number, size: number, sums: number[]): Promise<void> {
    const src = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const st = fstatSync(src);
      if (!st.isFile() || st.uid !== owner) throw new HearthError(`obj-keep: ${file} is not a regular file of uid ${owner} (the app's executors' user); nothing kept`);
      if (st.size !== size) throw new HearthError(`obj-keep: ${file} has ${st.size} bytes, not the ${size} the head received; nothing kept`);
      const dst = openSync(target, "w", this.opts.fileMode(app));
      try {
        for (let at = 0; at < size; at += CHUNK) {
          const chunk = await readChunk(src, at, Math.min(CHUNK, size - at), file);
          checkSum(chunk, at, sums, file);
          await writeAll(dst, chunk, at, target);
        }
      } finally {
        closeSync(dst);
      }
      this.own(app, target);
    } finally {
      closeSync(src);
    }
  }

  /** The agent's file, with the group and mode of the app's other files here (its executors lose write access to it). */
  private own(app: string, target: string): void {
    const gid = this.opts.groupOf(app);
    if (gid !== undefined) chownSync(target, process.geteuid?.() ?? 0, gid);
    chmodSync(target, this.opts.fileMode(app));
  }
}

/** Removes a kept part's file, if it has one. */
export function removeKept(p: KeptPart): void {
  if (p.file) rmSync(p.file, { force: true });
}

/** Every chunk of `file` against `sums`. */
async function checkFile(file: string, size: number, sums: number[]): Promise<void> {
  const fd = openSync(file, "r");
  try {
    for (let at = 0; at < size; at += CHUNK) checkSum(await readChunk(fd, at, Math.min(CHUNK, size - at), file), at, sums, file);
  } finally {
    closeSync(fd);
  }
}

function checkSum(chunk: Buffer, at: number, sums: number[], file: string): void {
  const sum = chunkSum(chunk);
  if (sum !== sums[at / CHUNK]) throw new HearthError(`obj-keep: the chunk at ${at} of ${file} has sum ${sum.toString(16)}, not the ${sums[at / CHUNK]!.toString(16)} the head received (the file changed after it was sent); nothing kept`);
}
