/**
 * `import { connect } from "hearth"` from a notebook in any folder. Two
 * resolvers must agree on the package:
 *
 * - Node's (cells and their local `.ts` imports run as CommonJS): the
 *   kernelspec sets `NODE_PATH` to `<kernelspec dir>/node_modules`, which
 *   holds one symlink `hearth` → this checkout (install.ts writes both), so
 *   `require("hearth/notebook")` goes through package.json `exports` to the
 *   checkout's dist/ — the same files `../dist/…` imports load.
 * - TypeScript's (tslab type-checks with Node10 resolution, which ignores
 *   NODE_PATH and `exports`): tslab reads files through `ts.sys`, and already
 *   forwards `<cwd>/node_modules/tslab/…` to its own package the same way;
 *   we forward `<cwd>/node_modules/hearth/…` to this checkout, whose
 *   package.json `types` and `typesVersions` name the declaration files. A
 *   real `node_modules/hearth` beside the notebook wins.
 */
import { fileURLToPath } from "node:url";
import path from "node:path";
import type { System } from "typescript";

/** The root of the checkout this kernel runs from (dist/kernel/ → ../../). */
export const CHECKOUT_ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** The package name notebooks import. */
export const PACKAGE_NAME = "hearth";

/** Makes `ts` (tslab's TypeScript) see `<cwd>/node_modules/hearth` as `checkoutRoot`. Returns the undo. */
export function forwardHearthTypes(sys: System, cwd: string, checkoutRoot: string = CHECKOUT_ROOT): () => void {
  const virtualRoot = normalize(path.join(cwd, "node_modules", PACKAGE_NAME));
  const real = normalize(checkoutRoot).replace(/\/$/, "");
  const original = { fileExists: sys.fileExists, readFile: sys.readFile, directoryExists: sys.directoryExists, realpath: sys.realpath, getDirectories: sys.getDirectories };
  const origDirExists = original.directoryExists.bind(sys);
  // Forward only when nothing real is installed there.
  const forward = (p: string): string => {
    const n = normalize(p);
    if (n !== virtualRoot && !n.startsWith(virtualRoot + "/")) return p;
    if (origDirExists(virtualRoot)) return p;
    return real + n.slice(virtualRoot.length);
  };
  sys.fileExists = (p) => original.fileExists.call(sys, forward(p));
  sys.readFile = (p, encoding) => original.readFile.call(sys, forward(p), encoding);
  sys.directoryExists = (p) => original.directoryExists.call(sys, forward(p));
  sys.getDirectories = (p) => original.getDirectories.call(sys, forward(p));
  if (original.realpath) {
    const realpath = original.realpath;
    // Declarations resolve to the checkout's real files, so `hearth` and `../dist/sdk/index.js` are one module to the checker.
    sys.realpath = (p) => realpath.call(sys, forward(p));
  }
  return () => Object.assign(sys, original);
}

function normalize(p: string): string {
  return p.replace(/\\/g, "/");
}
