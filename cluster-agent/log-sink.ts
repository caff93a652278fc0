/**
 * Where the head and agents write their log lines: a file descriptor
 * (stderr by default), written synchronously a line at a time. A line the
 * descriptor will not take — a full disk (ENOSPC), a reader that went away
 * (EPIPE), a pipe that would block (EAGAIN) — is dropped and counted, never
 * thrown: logging must not take a long-lived process down. The counts go
 * into the head's status, so a silent log is visible.
 *
 * It writes to the descriptor itself rather than through `process.stderr`:
 * that stream destroys itself on its first write error and raises an
 * `error` event that kills the process when unhandled; a descriptor can be
 * written again once the disk has room.
 */
import { writeSync } from "node:fs";

/** Counts of one sink. */
export interface LogSinkStats {
  /** Lines written whole. */
  written: number;
  /** Lines dropped (whole or the rest of a partly written one) because the descriptor refused them. */
  dropped: number;
  /** The last refusal (e.g. "ENOSPC"), or null. */
  lastError: string | null;
}

/** A line-at-a-time log writer that never throws. */
export class LogSink {
  readonly stats: LogSinkStats = { written: 0, dropped: 0, lastError: null };

  /**
   * @param prefix what follows the timestamp on every line ("head", "agent n1")
   * @param fd the descriptor to write to; default 2 (stderr)
   */
  constructor(
    private readonly prefix: string,
    private readonly fd = 2,
  ) {}

  /** Writes `line` with a timestamp and the prefix; drops and counts it if the descriptor refuses. */
  write(line: string): void {
    const bytes = Buffer.from(`${new Date().toISOString()} ${this.prefix} ${line}\n`);
    let off = 0;
    try {
      while (off < bytes.length) off += writeSync(this.fd, bytes, off);
      this.stats.written++;
    } catch (err) {
      this.stats.dropped++;
      this.stats.lastError = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    }
  }
}
