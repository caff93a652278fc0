/**
 * A folder tree through the object cache: a detached run's outputs (which
 * `hearth fetch` writes where the client is) and the checkpoint a detached
 * run resumes from (which the client ships to wherever its loop runs).
 */
import { readdirSync, statSync } from "node:fs";
import path from "node:path";
import type { ObjectCache } from "../../cache/object-cache.js";
import { dropFolder, fetchFolder, shipFolder, type FolderRef } from "../../cache/folder.js";

/** A folder of the outputs and its subfolders, each shipped as cache objects (`rel` "" is the top). */
export interface ShippedTree {
  folders: Array<{ rel: string; folder: FolderRef }>;
}

/** Ships `dir` and every folder under it as cache objects. */
export async function shipTree(objects: ObjectCache, dir: string, rel = ""): Promise<ShippedTree> {
  const abs = path.join(dir, rel);
  const folders: ShippedTree["folders"] = [{ rel, folder: await shipFolder(objects, abs, { objects: true, forceObjects: true }) }];
  for (const n of readdirSync(abs).sort()) {
    if (statSync(path.join(abs, n)).isDirectory()) folders.push(...(await shipTree(objects, dir, path.join(rel, n))).folders);
  }
  return { folders };
}

/** Writes a shipped tree into `dir`; returns the bytes written. */
export async function fetchTree(objects: ObjectCache, tree: ShippedTree, dir: string): Promise<number> {
  let bytes = 0;
  for (const f of tree.folders) bytes += await fetchFolder(objects, f.folder, path.join(dir, f.rel));
  return bytes;
}

/** Deletes a shipped tree's objects. */
export async function dropTree(objects: ObjectCache, tree: ShippedTree): Promise<void> {
  for (const f of tree.folders) await dropFolder(objects, f.folder);
}
