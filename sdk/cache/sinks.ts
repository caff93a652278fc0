/**
 * Where downloaded chunks go when a part is not assembled in memory: a file
 * (each chunk written at its offset as it arrives, so a window of chunks in
 * flight may land in any order) or an ordered stream (chunks handed to a
 * reader in order, with the fetch held back while the reader is behind, so
 * only a few chunks are ever buffered).
 */
import { closeSync, openSync, rmSync } from "node:fs";
import { HearthError } from "../errors/index.js";
import { writeAll } from "./file-io.js";
import { CHUNK, WINDOW, type PartSink } from "./transfer.js";

/** A sink writing a part into `file` (created with `mode`, default 0600); the file is removed if the transfer fails. */
export function fileSink(file: string, opts: { mode?: number; offset?: number; keepOnAbort?: boolean } = {}): PartSink {
  const fd = openSync(file, "w", opts.mode ?? 0o600);
  const base = opts.offset ?? 0;
  let open = true;
  const close = (): void => {
    if (open) closeSync(fd);
    open = false;
  };
  return {
    // Every byte down or an error (a short write on a filling disk is not a written chunk: file-io.ts).
    write: (chunk, offset) => writeAll(fd, chunk, base + offset, file),
    end: close,
    abort: () => {
      close();
      if (!opts.keepOnAbort) rmSync(file, { force: true });
    },
  };
}

/**
 * Chunks of one or more consecutive parts, reordered into one stream. A
 * write more than a few chunks ahead of the reader waits for it, so the
 * buffer stays bounded however fast the fetch is.
 */
export class OrderedChunks implements AsyncIterable<Buffer> {
  private readonly waiting = new Map<number, Buffer>();
  /** Stream position the reader has consumed up to. */
  private position = 0;
  private end?: number;
  private failure?: unknown;
  private wakeReader?: () => void;
  private readonly wakeWriters: Array<() => void> = [];
  /** How far ahead of the reader a chunk may be buffered. */
  private readonly ahead = (WINDOW + 2) * CHUNK;

  /** A sink for part `index`, whose first byte lies at `start()` in the stream. */
  sinkFor(index: number, start: () => number): PartSink {
    void index;
    return {
      write: async (chunk, offset) => {
        const at = start() + offset;
        while (this.failure === undefined && at - this.position > this.ahead) await new Promise<void>((r) => this.wakeWriters.push(r));
        if (this.failure !== undefined) throw this.failure;
        this.waiting.set(at, chunk);
        this.wakeReader?.();
      },
      end: () => undefined,
      abort: () => undefined,
    };
  }

  /** Every chunk was written: the stream is `total` bytes. */
  finish(total: number): void {
    this.end = total;
    this.wakeReader?.();
  }

  /** The fetch failed (or the reader left): both sides stop. */
  fail(err: unknown): void {
    this.failure ??= err;
    this.wakeReader?.();
    for (const w of this.wakeWriters.splice(0)) w();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    for (;;) {
      const chunk = this.waiting.get(this.position);
      if (chunk) {
        this.waiting.delete(this.position);
        this.position += chunk.byteLength;
        for (const w of this.wakeWriters.splice(0)) w();
        yield chunk;
        continue;
      }
      if (this.end !== undefined && this.position >= this.end) return;
      if (this.failure !== undefined) throw this.failure instanceof Error ? this.failure : new HearthError(String(this.failure));
      await new Promise<void>((r) => (this.wakeReader = r));
      this.wakeReader = undefined;
    }
  }
}
