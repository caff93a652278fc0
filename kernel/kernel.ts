/**
 * Composes the layers into a running kernel: connection file → sockets →
 * router → TypeScript handler. SIGINT (Jupyter's default interrupt_mode,
 * "signal") and interrupt_request both interrupt the running cell.
 */
import { createRequire } from "node:module";
import { HistoryStore, defaultHistoryDir } from "./history.js";
import { KernelSockets } from "./sockets.js";
import { Router } from "./router.js";
import { TypeScriptHandler } from "./ts-handler.js";
import { readConnectionFile } from "./wire.js";

const require = createRequire(import.meta.url);

/** Options of runKernel. */
export interface RunKernelOptions {
  connectionFile: string;
  /** Resolves imports in cells; default the process's cwd (the notebook's directory under Jupyter). */
  rootDir?: string;
  /** Where sessions' history files live; default `$HEARTH_KERNEL_HISTORY`, else `$HEARTH_HOME/kernel/history`. */
  historyDir?: string;
}

/** Versions shown in kernel_info: hearth's and the TypeScript tslab compiles with. */
export function kernelVersions(): { hearth: string; typescript: string; tslab: string } {
  const tslabRequire = createRequire(require.resolve("tslab/package.json"));
  return {
    hearth: (require("../../package.json") as { version: string }).version,
    typescript: (tslabRequire("@tslab/typescript-for-tslab/package.json") as { version: string }).version,
    tslab: (require("tslab/package.json") as { version: string }).version,
  };
}

/** Runs a kernel until a client asks it to shut down (or SIGTERM); returns the exit code. */
export async function runKernel(opts: RunKernelOptions): Promise<number> {
  const stderrWrite = process.stderr.write.bind(process.stderr);
  const log = (line: string) => void stderrWrite(`[hearth kernel] ${line}\n`);
  const info = readConnectionFile(opts.connectionFile);
  const sockets = await KernelSockets.bind(info);
  const versions = kernelVersions();
  let history: HistoryStore | null = null;
  try {
    history = HistoryStore.open(opts.historyDir ?? process.env.HEARTH_KERNEL_HISTORY ?? defaultHistoryDir());
  } catch (err) {
    // A read-only home must not stop the kernel: it runs without history.
    log(`history disabled: ${String(err)}`);
  }
  const handler = new TypeScriptHandler({
    rootDir: opts.rootDir ?? process.cwd(),
    log,
    typescriptVersion: versions.typescript,
    implementationVersion: versions.hearth,
    history,
  });
  handler.install();
  const router = new Router(sockets, handler, log);
  const onSigint = () => handler.interrupt();
  process.on("SIGINT", onSigint);
  const terminated = new Promise<void>((resolve) => {
    process.once("SIGTERM", () => resolve());
    watchParent(resolve);
  });
  router.start();
  log(`ready (pid ${process.pid}, shell port ${info.shell_port})`);
  await Promise.race([router.shutdown, terminated]);
  process.off("SIGINT", onSigint);
  handler.close();
  await sockets.close();
  return 0;
}

/**
 * Jupyter clients set JPY_PARENT_PID; like ipykernel, exit when that process is
 * gone so a crashed client never leaves an orphaned kernel behind.
 */
function watchParent(onGone: () => void): void {
  const pid = Number(process.env.JPY_PARENT_PID);
  if (!(pid > 1)) return;
  const timer = setInterval(() => {
    try {
      process.kill(pid, 0);
    } catch {
      clearInterval(timer);
      onGone();
    }
  }, 1000);
  timer.unref();
}
