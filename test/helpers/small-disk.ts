/**
 * A real small file system for tests of what the head does when its disk
 * is full (ENOSPC) or read-only (EROFS): a tmpfs of a few MiB mounted on a
 * fresh folder. Mounting needs root with CAP_SYS_ADMIN; `smallDiskSupport()`
 * says why not where that is missing, and the tests skip with that reason.
 */
import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, statSync, truncateSync, writeSync } from "node:fs";
import os from "node:os";
import path from "node:path";

/** Whether a tmpfs can be mounted here, and why not. */
export function smallDiskSupport(): { ok: true } | { ok: false; reason: string } {
  if (process.getuid?.() !== 0) return { ok: false, reason: "mounting a tmpfs (a real small disk) needs root" };
  let disk: SmallDisk | undefined;
  try {
    disk = SmallDisk.mount(1);
    return { ok: true };
  } catch (err) {
    return { ok: false, reason: `cannot mount a tmpfs (no CAP_SYS_ADMIN?): ${(err as Error).message.split("\n")[0]}` };
  } finally {
    disk?.unmount();
  }
}

/** A mounted tmpfs. */
export class SmallDisk {
  private readonly filler: string;

  private constructor(readonly dir: string) {
    this.filler = path.join(dir, ".filler");
  }

  /** Mounts a tmpfs of `mib` MiB on a fresh folder. */
  static mount(mib: number): SmallDisk {
    const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-disk-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${mib}m,mode=0700`, "tmpfs", dir], { stdio: ["ignore", "ignore", "pipe"] });
    return new SmallDisk(dir);
  }

  /**
   * Fills every free byte with a filler file: from now on writes fail with
   * ENOSPC. With `leave`, that many bytes (whole pages) stay free: a larger
   * write then takes what fits and returns short, with no error (the next
   * write gets ENOSPC).
   */
  fill(opts: { leave?: number } = {}): void {
    const fd = openSync(this.filler, "a");
    const block = Buffer.alloc(4096, 0x5a);
    try {
      for (;;) writeSync(fd, block);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
    } finally {
      closeSync(fd);
    }
    if (opts.leave) truncateSync(this.filler, Math.max(0, statSync(this.filler).size - opts.leave));
  }

  /** Removes the filler: the disk has room again. */
  free(): void {
    rmSync(this.filler, { force: true });
  }

  /** Remounts read-only (`ro`) or read-write: writes and unlinks fail with EROFS while read-only. */
  readOnly(ro: boolean): void {
    execFileSync("mount", ["-o", `remount,${ro ? "ro" : "rw"}`, this.dir], { stdio: ["ignore", "ignore", "pipe"] });
  }

  /** Unmounts and removes the folder. Idempotent. */
  unmount(): void {
    try {
      execFileSync("umount", [this.dir], { stdio: ["ignore", "ignore", "pipe"] });
    } catch {
      // Already unmounted.
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
