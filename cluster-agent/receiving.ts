/**
 * A copy a node cache is receiving: its large parts fill their files chunk by
 * chunk while other nodes may already read them (pass-through). A reader of a
 * chunk that has not arrived waits for it; if the fetch fails, every waiting
 * and later read fails with the fetch's error, so nobody is handed a short or
 * torn copy. The copy becomes the node's own only when every chunk is there
 * (the store installs it then, renaming the files into place); until then the
 * store serves the last complete version.
 *
 * The last RECENT_CHUNKS chunks that arrived stay in memory as they came
 * (each was checked against its sum before it was written): a node passing
 * the copy on serves a peer reading right behind it from them, instead of
 * reading every chunk back from its file and summing it again for each
 * peer. An older chunk is read from the file and checked, as before.
 */
import { closeSync, openSync, rmSync } from "node:fs";
import { writeAll } from "../sdk/cache/file-io.js";
import { HearthError } from "../sdk/errors/index.js";
import type { PartMeta, PartSink } from "../sdk/cache/transfer.js";
import { CHUNK } from "../sdk/cache/transfer.js";
import { allocObjectBuffer } from "../sdk/cache/buffers.js";
import { readChecked, type PartSource } from "./part-source.js";
import { storageError } from "./head/object-store.js";

/** How long a reader waits for a chunk that has not arrived (the upstream fetch is stalled past it). */
export const CHUNK_WAIT_MS = 60_000;

/** Chunks a receiving part keeps in memory for the peers reading behind it (8 MiB each). */
export const RECENT_CHUNKS = 8;

/** One part of a copy being received. */
export class ReceivingPart implements PartSink {
  /** A small part's bytes (large parts go to `file`). */
  readonly data?: Buffer;
  /** Offsets of the chunks written. */
  private readonly have = new Set<number>();
  /** Chunk writes under way, by offset. */
  private readonly writing = new Map<number, Promise<void>>();
  private readonly waiters = new Map<number, Array<{ resolve: () => void; reject: (e: unknown) => void }>>();
  private fd?: number;
  private failure?: unknown;
  /** The fetch's own hold plus one per open source; the descriptor closes at zero. */
  private users = 1;
  private fetchDone = false;
  /** The last chunks that arrived (checked), by offset, oldest first. */
  private readonly recent = new Map<number, Buffer>();
  /** Whether arriving chunks stay in memory for the peers behind (dropRecent ends it). */
  private keepRecent = true;
  /** Bytes written so far. */
  written = 0;
  /** Bytes sources served from the chunks kept in memory (not read back from the file). */
  servedFromMemory = 0;
  /** Settles when every byte is here (or the fetch failed): a reader of the whole part waits for it. */
  readonly whole: Promise<void>;
  private settleWhole!: (err?: unknown) => void;

  /**
   * @param file where a large part is written (created here with `mode`), or undefined for a small part kept in memory
   * @param what names the object in errors
   */
  constructor(
    readonly meta: PartMeta,
    readonly file: string | undefined,
    mode: number,
    private readonly what: { key: string; app?: string },
    /** Its index in the copy's parts (for errors). */
    private readonly index = 0,
  ) {
    this.whole = new Promise<void>((resolve, reject) => (this.settleWhole = (err) => (err === undefined ? resolve() : reject(err))));
    this.whole.catch(() => undefined); // nobody may be waiting
    if (meta.size === 0) this.settleWhole();
    if (file) {
      try {
        this.fd = openSync(file, "w+", mode);
      } catch (err) {
        throw storageError("fetch", `${what.app ?? ""}/${what.key}`, err, " (the head's copy is untouched)", "this node's cache dir");
      }
    } else this.data = allocObjectBuffer(meta.size, what);
  }

  /**
   * Has the chunk at `offset` arrived, or is it being written? What a source
   * that failed had already delivered is not asked of the next one (a write
   * that fails fails the whole copy, so nothing is left missing).
   */
  holds(offset: number): boolean {
    return this.have.has(offset) || this.writing.has(offset);
  }

  /** Is every chunk here? */
  get complete(): boolean {
    return this.written === this.meta.size;
  }

  /** Writes the chunk at `offset` unless it is here; `tally` (its source's count) gains its bytes only when this call wrote them. */
  async write(chunk: Buffer, offset: number, tally?: { bytes: number }): Promise<void> {
    if (this.failure !== undefined) throw this.failure;
    if (this.have.has(offset)) return;
    // The same chunk from two sources (a peer that failed with it in flight, then the head): written and counted once.
    const inFlight = this.writing.get(offset);
    if (inFlight) {
      const done = await inFlight.then(() => true, () => false);
      if (done) return;
    }
    const w = this.writeOnce(chunk, offset, tally);
    this.writing.set(offset, w);
    try {
      await w;
    } finally {
      if (this.writing.get(offset) === w) this.writing.delete(offset);
    }
  }

  private async writeOnce(chunk: Buffer, offset: number, tally?: { bytes: number }): Promise<void> {
    if (this.data) chunk.copy(this.data, offset);
    else {
      try {
        // Every byte down or the fetch fails: a short write on a filling disk is not a written chunk.
        await writeAll(this.fd!, chunk, offset, this.file);
      } catch (err) {
        // A full or failing disk: the whole fetch fails, naming the object and the code.
        const e = storageError("fetch", `${this.what.app ?? ""}/${this.what.key}`, err, " (the head's copy is untouched)", "this node's cache dir");
        this.abort(e);
        throw e;
      }
    }
    if (this.have.has(offset)) return;
    this.have.add(offset);
    this.written += chunk.byteLength;
    if (this.fd !== undefined && !this.fetchDone && this.keepRecent) {
      this.recent.set(offset, chunk);
      if (this.recent.size > RECENT_CHUNKS) this.recent.delete(this.recent.keys().next().value!);
    }
    if (tally) tally.bytes += chunk.byteLength;
    for (const w of this.waiters.get(offset) ?? []) w.resolve();
    this.waiters.delete(offset);
    if (this.written === this.meta.size) this.settleWhole();
  }

  end(): void {
    if (this.written !== this.meta.size) throw new HearthError(`part of '${this.what.key}' ended with ${this.written} of ${this.meta.size} bytes`);
  }

  /** The fetch failed: waiting readers fail, the file goes once nobody reads it. */
  abort(err: unknown): void {
    this.failure ??= err;
    if (this.written !== this.meta.size) this.settleWhole(this.failure);
    for (const list of this.waiters.values()) for (const w of list) w.reject(this.failure);
    this.waiters.clear();
    this.done(true);
  }

  /** A source reading this part as it fills (another node's pass-through read). */
  source(): PartSource {
    this.users++;
    let closed = false;
    return {
      size: this.meta.size,
      read: async (offset, length) => {
        await this.arrived(offset);
        if (this.data) return this.data.subarray(offset, offset + length);
        const at = offset - (offset % CHUNK);
        const kept = this.recent.get(at);
        if (kept && offset - at + length <= kept.byteLength) {
          this.servedFromMemory += length;
          return kept.subarray(offset - at, offset - at + length);
        }
        // Read back from the file and checked again: what another node gets is what the head recorded.
        return readChecked(this.fd!, this.file!, this.meta.size, this.meta.sums, offset, length, this.what, this.index);
      },
      close: () => {
        if (!closed) this.unref();
        closed = true;
      },
    };
  }

  /** The chunks kept in memory go (a part that stays readable long after it arrived): later reads come from the file. */
  dropRecent(): void {
    this.keepRecent = false;
    this.recent.clear();
  }

  /**
   * The fetch is done with this part (installed, or given up; once): its
   * descriptor closes once the last reader is done; a part that was not
   * installed also loses its file.
   */
  done(removeFile: boolean): void {
    if (this.fetchDone) return;
    this.fetchDone = true;
    this.recent.clear();
    if (removeFile && this.file) rmSync(this.file, { force: true });
    this.unref();
  }

  private unref(): void {
    if (--this.users > 0) return;
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private arrived(offset: number): Promise<void> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.have.has(offset - (offset % CHUNK))) return Promise.resolve();
    const at = offset - (offset % CHUNK);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new HearthError(`chunk at ${at} of '${this.what.key}' did not arrive within ${CHUNK_WAIT_MS / 1000} s (the upstream copy is stalled)`)), CHUNK_WAIT_MS);
      const list = this.waiters.get(at) ?? [];
      list.push({
        resolve: () => (clearTimeout(timer), resolve()),
        reject: (e) => (clearTimeout(timer), reject(e)),
      });
      this.waiters.set(at, list);
    });
  }
}

/** A part's description without its place (what a store keeps and a peer is told). */
export function meta(p: PartMeta): PartMeta {
  return { kind: p.kind, dtype: p.dtype, size: p.size, version: p.version, ...(p.sums ? { sums: p.sums } : {}) };
}

/** The same chunk sums (none on `a`: not the same). */
export function sameSums(a: readonly number[] | undefined, b: readonly number[]): boolean {
  return !!a && a.length === b.length && a.every((s, i) => s === b[i]);
}

/** The same parts by size, version and kind. */
export function sameParts(a: PartMeta[] | undefined, b: PartMeta[]): boolean {
  return !!a && a.length === b.length && a.every((p, i) => p.size === b[i]!.size && p.version === b[i]!.version && p.kind === b[i]!.kind);
}

/** `parts` as sinks that count what each write added in `tally`. */
export function tallied(parts: readonly ReceivingPart[], tally: { bytes: number }): PartSink[] {
  return parts.map((p) => ({ write: (chunk: Buffer, offset: number) => p.write(chunk, offset, tally), end: () => p.end(), abort: (err: unknown) => p.abort(err) }));
}
