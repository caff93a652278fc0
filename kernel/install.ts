/**
 * Installs and removes the kernelspec: `<prefix>/share/jupyter/kernels/<name>/kernel.json`
 * whose argv runs this checkout's compiled CLI with an absolute path, so a
 * Jupyter client finds the kernel without PATH or npx.
 *
 * Spec: https://jupyter-client.readthedocs.io/en/stable/kernels.html#kernel-specs
 */
import { existsSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CHECKOUT_ROOT } from "./hearth-imports.js";

/** The kernelspec name used unless --name is given. */
export const DEFAULT_KERNEL_NAME = "hearth";

/** Where to install: the user's data dir, a prefix (JUPYTER_PATH = <prefix>/share/jupyter), or sys.prefix-like default. */
export interface KernelInstallOptions {
  user?: boolean;
  prefix?: string;
  name?: string;
}

/** The kernelspec document. */
export interface KernelSpec {
  argv: string[];
  display_name: string;
  language: string;
  interrupt_mode: "signal" | "message";
  env?: Record<string, string>;
  metadata?: Record<string, unknown>;
}

/** The kernels directory an install with `opts` writes to. */
export function kernelsDir(opts: KernelInstallOptions): string {
  if (opts.prefix) return path.join(path.resolve(opts.prefix), "share", "jupyter", "kernels");
  if (opts.user || process.getuid?.() !== 0) {
    const data = process.env.JUPYTER_DATA_DIR ?? path.join(process.env.XDG_DATA_HOME ?? path.join(homedir(), ".local", "share"), "jupyter");
    return path.join(data, "kernels");
  }
  return path.join("/usr/local/share/jupyter/kernels");
}

/**
 * The kernelspec for this checkout: node (this executable) + the absolute path
 * of dist/cluster-agent/cli.js. With `specDir`, NODE_PATH is
 * `<specDir>/node_modules`, where installKernel links `hearth` to this
 * checkout (see hearth-imports.ts).
 */
export function kernelSpec(name: string = DEFAULT_KERNEL_NAME, specDir?: string): KernelSpec {
  const cli = fileURLToPath(new URL("../cluster-agent/cli.js", import.meta.url));
  return {
    ...(specDir ? { env: { NODE_PATH: path.join(specDir, "node_modules") } } : {}),
    argv: [process.execPath, cli, "kernel", "run", "--connection-file", "{connection_file}"],
    display_name: name === DEFAULT_KERNEL_NAME ? "TypeScript (hearth)" : `TypeScript (hearth: ${name})`,
    language: "typescript",
    // SIGINT stops synchronous loops too; interrupt_request can only reach an idle event loop.
    interrupt_mode: "signal",
    metadata: { debugger: false },
  };
}

/** Writes kernel.json; returns the kernelspec directory. */
export function installKernel(opts: KernelInstallOptions = {}): string {
  const name = opts.name ?? DEFAULT_KERNEL_NAME;
  if (!/^[a-zA-Z0-9._-]+$/.test(name)) throw new Error(`bad kernel name '${name}': use letters, digits, '.', '_' or '-'`);
  const dir = path.join(kernelsDir(opts), name);
  mkdirSync(path.join(dir, "node_modules"), { recursive: true });
  // `import "hearth"` from a notebook in any folder resolves to this checkout through this link.
  const link = path.join(dir, "node_modules", "hearth");
  rmSync(link, { force: true });
  symlinkSync(CHECKOUT_ROOT.replace(/[\\/]$/, ""), link, "dir");
  writeFileSync(path.join(dir, "kernel.json"), JSON.stringify(kernelSpec(name, dir), null, 2) + "\n");
  return dir;
}

/** Removes the kernelspec directory; returns it, or null when nothing was installed there. */
export function uninstallKernel(opts: KernelInstallOptions = {}): string | null {
  const dir = path.join(kernelsDir(opts), opts.name ?? DEFAULT_KERNEL_NAME);
  if (!existsSync(path.join(dir, "kernel.json"))) return null;
  rmSync(dir, { recursive: true, force: true });
  return dir;
}
