/**
 * Locating the engine: the Python interpreter that can import torch and the
 * directory holding the `hearth_engine` package.
 */

import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { EngineError } from "./errors.js";

/** Interpreters tried, in order, when `HEARTH_PYTHON` is unset (Debian's comes first: only it sees python3-torch). */
export const PYTHON_CANDIDATES: readonly string[] = ["/usr/bin/python3", "python3"];

function canImportTorch(python: string): Promise<boolean> {
  return new Promise((done) => {
    execFile(python, ["-c", "import torch"], { timeout: 60_000 }, (err) => done(err === null));
  });
}

const found = new Map<string, Promise<string>>();

/**
 * The interpreter to run the engine with: `explicit`, else `HEARTH_PYTHON`,
 * else the first candidate that can `import torch` (checked once per process).
 */
export function findPython(explicit?: string): Promise<string> {
  const chosen = explicit ?? process.env.HEARTH_PYTHON;
  if (chosen) return Promise.resolve(chosen);
  const key = PYTHON_CANDIDATES.join("\0");
  let pending = found.get(key);
  if (!pending) {
    pending = (async () => {
      for (const python of PYTHON_CANDIDATES) if (await canImportTorch(python)) return python;
      throw new EngineError({
        code: "no_python",
        message: `no interpreter among ${PYTHON_CANDIDATES.join(", ")} can import torch; set HEARTH_PYTHON`,
      });
    })();
    found.set(key, pending);
    pending.catch(() => found.delete(key));
  }
  return pending;
}

/**
 * The directory containing the `hearth_engine` package: `explicit`, else
 * `HEARTH_ENGINE_DIR`, else `cluster-agent/engine` found by walking up from
 * this module (works from the sources and from `dist/`).
 */
export function findEngineDir(explicit?: string): string {
  const chosen = explicit ?? process.env.HEARTH_ENGINE_DIR;
  if (chosen) return resolve(chosen);
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = join(dir, "cluster-agent", "engine");
    if (existsSync(join(candidate, "hearth_engine", "__init__.py"))) return candidate;
    const parent = dirname(dir);
    if (parent === dir) {
      throw new EngineError({ code: "spawn_failed", message: "cannot find cluster-agent/engine; set HEARTH_ENGINE_DIR" });
    }
    dir = parent;
  }
}
