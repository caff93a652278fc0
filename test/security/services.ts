/**
 * A service for the adversarial suite: it tells the test what its executor
 * was given (routing id, cache endpoint, credential), so the test can try to
 * use what an attacker on the same machine could guess or learn.
 */
import { chmodSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { openFolder, type FolderRef } from "../../sdk/cache/folder.js";
import type { ExecutorContext } from "../../sdk/runtime/types.js";

/** Reports its wire identity and answers pings. */
export class Vault {
  private ctx!: ExecutorContext;

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** Who answered: the test checks no call reached anyone else. */
  ping(): { executorId: string; pid: number } {
    return { executorId: this.ctx.executorId, pid: process.pid };
  }

  /** What the agent put in this executor's environment. */
  identity(): { executorId: string; app: string; routingId: string | null; cache: string | null; token: string | null; secretFile: string | null; home: string | null } {
    return {
      executorId: this.ctx.executorId,
      app: this.ctx.app,
      routingId: process.env.HEARTH_EXECUTOR_ROUTING_ID ?? null,
      cache: process.env.HEARTH_AGENT_CACHE ?? null,
      token: process.env.HEARTH_EXECUTOR_TOKEN ?? null,
      secretFile: process.env.HEARTH_SECRET_FILE ?? null,
      home: process.env.HEARTH_HOME ?? null,
    };
  }

  /** Reads an object of its own app through the agent's cache. */
  async read(key: string): Promise<unknown> {
    return await this.ctx.objects.get(key);
  }
}

/** What happened when an executor tried to read a path. */
export interface ProbeResult {
  path: string;
  /** "read" when it could, else the error code (EACCES, EPERM, ENOENT …). */
  outcome: string;
}

/**
 * A service that plays the hostile app: it tries to read what an app token
 * must not open (the cluster secret, the agent's state, other executors'
 * environments) and reports each outcome; and does what an executor must
 * still do (its own objects, a shipped folder).
 */
export class Prober {
  private ctx!: ExecutorContext;

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** Who this executor runs as, and where its HOME and TMPDIR are. */
  whoami(): { pid: number; uid: number; gid: number; home: string | null; tmpdir: string; hearthHome: string | null } {
    return { pid: process.pid, uid: process.getuid!(), gid: process.getgid!(), home: process.env.HOME ?? null, tmpdir: os.tmpdir(), hearthHome: process.env.HEARTH_HOME ?? null };
  }

  /** Tries to read each path (a folder is listed); never throws. */
  probe(paths: string[]): ProbeResult[] {
    return paths.map((p) => {
      try {
        if (statSync(p).isDirectory()) readdirSync(p);
        else readFileSync(p);
        return { path: p, outcome: "read" };
      } catch (err) {
        return { path: p, outcome: (err as NodeJS.ErrnoException).code ?? String(err) };
      }
    });
  }

  /** Reads an object of its own app through the agent's cache. */
  async read(key: string): Promise<unknown> {
    return await this.ctx.objects.get(key);
  }

  /**
   * Writes `text` to `name` in its HOME, readable by everyone (mode 0644), and
   * returns the path: only the HOME folder's own permissions can then keep
   * another app's executor from reading it.
   */
  plant(name: string, text: string): string {
    const file = path.join(process.env.HOME ?? os.homedir(), name);
    writeFileSync(file, text, { mode: 0o644 });
    chmodSync(file, 0o644); // whatever the umask
    return file;
  }

  /** The text of `file`, or the error code that kept it from being read. */
  readText(file: string): { text: string | null; outcome: string } {
    try {
      return { text: readFileSync(file, "utf8"), outcome: "read" };
    } catch (err) {
      return { text: null, outcome: (err as NodeJS.ErrnoException).code ?? String(err) };
    }
  }

  /** Opens a shipped folder and returns where it landed and the text of `name` in it. */
  async openShipped(ref: FolderRef, name: string): Promise<{ dir: string; inPlace: boolean; text: string }> {
    const opened = await openFolder(this.ctx.objects, ref);
    return { dir: opened.dir, inPlace: opened.inPlace, text: readFileSync(path.join(opened.dir, name), "utf8") };
  }
}
