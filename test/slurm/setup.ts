/**
 * Shared setup of the Slurm tests: a real two-node Slurm (harness.ts), a
 * throw-away HEARTH_HOME, and an app connected with `engine: "slurm"` whose
 * head (on this machine, loopback) declares agents lost after 2 s.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { connect, type App } from "../../sdk/runtime/app.js";
import { stopSlurmHead, type SlurmConnectOptions } from "../../sdk/engines/slurm/index.js";
import { startSlurm, type SlurmCluster } from "./harness.js";

/** The compiled Slurm test services module. */
export const SERVICES = path.join(path.dirname(fileURLToPath(import.meta.url)), "services.js");

/** A Slurm cluster plus a hearth home whose head is stopped by `stop()`. */
export interface SlurmWorld {
  slurm: SlurmCluster;
  home: string;
  /** Connects an app with the Slurm engine (`extra` adds connect and engine options). */
  connect(name: string, extra?: { keepAliveMs?: number; slurm?: SlurmConnectOptions }): Promise<App>;
  /** Closes the apps, stops the head, then Slurm: no process left behind. */
  stop(): Promise<void>;
}

/** Starts Slurm and prepares a hearth home. */
export async function startWorld(): Promise<SlurmWorld> {
  const slurm = await startSlurm();
  const home = mkdtempSync(path.join(os.tmpdir(), "hearth-slurm-home-"));
  const apps: App[] = [];
  return {
    slurm,
    home,
    async connect(name, extra = {}) {
      const app = await connect({
        name,
        engine: "slurm",
        local: { home },
        keepAliveMs: extra.keepAliveMs,
        slurm: { agentTimeoutMs: 2000, env: slurm.env, pollMs: 250, ...extra.slurm },
      });
      apps.push(app);
      return app;
    },
    async stop() {
      try {
        for (const app of apps) await app.close().catch(() => undefined);
        await stopSlurmHead(home);
      } finally {
        await slurm.stop();
        rmSync(home, { recursive: true, force: true });
      }
    },
  };
}

/** Polls until `probe` returns a value (not undefined). */
export async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
