/**
 * How executors import the modules they are given by path: service classes
 * (cluster-agent/executor-host.ts) and, in a run's loop, reward functions.
 */
import { accessSync, constants } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { HearthError } from "../errors/index.js";

/**
 * Imports a service module (or any module an executor loads by path);
 * TypeScript goes through tsx's loader, scoped to this import (JavaScript
 * services never load it). A file the executor's user cannot read is a
 * clear error saying why (isolated executors) and what to do.
 */
export async function importServiceModule(module: string, opts: { fresh?: boolean } = {}): Promise<Record<string, unknown>> {
  const file = path.isAbsolute(module) ? module : module.startsWith("file:") ? fileURLToPath(module) : undefined;
  if (file !== undefined) {
    try {
      accessSync(file, constants.R_OK);
    } catch (err) {
      // Isolated executors (an agent run as root starts each app's as its own user) read only what other users may.
      if ((err as NodeJS.ErrnoException).code === "EACCES") {
        throw new HearthError(
          `cannot read ${file} as this executor's user (uid ${process.getuid?.() ?? "?"}): an agent run as root starts each app's executors as a user of that app alone, ` +
            `who reads only what other users may. Put the module (and the folders above it) where others can read it, ship its project (connect({ project: true })), ` +
            `or run the agent with --executor-uids none`,
        );
      }
    }
  }
  // A fresh import reads the file again (a reward module edited between cells); a module's own imports stay cached.
  const spec = (path.isAbsolute(module) ? pathToFileURL(module).href : module) + (opts.fresh ? `?t=${Date.now()}` : "");
  if (!/\.[mc]?tsx?$/.test(module)) return (await import(spec)) as Record<string, unknown>;
  const { tsImport } = await import("tsx/esm/api");
  return (await tsImport(spec, import.meta.url)) as Record<string, unknown>;
}
