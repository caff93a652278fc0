/**
 * Service modules written in TypeScript beside a notebook. Executors import
 * compiled JavaScript, and a notebook has no build step, so this transpiles
 * one self-contained `.ts` file (type-only imports are fine; relative imports
 * of other local files are not) to an ES module under
 * `$HEARTH_HOME/modules/<content hash>/`. The same source always yields the
 * same path, so re-declaring the service after a kernel restart finds the
 * warm executors of the same definition.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { hearthHome } from "../engines/local.js";

/** Options of compileServiceModule. */
export interface CompileServiceOptions {
  /** Output root (default `$HEARTH_HOME/modules`). */
  outDir?: string;
}

/** Transpiles `source` (a .ts path or file URL; relative paths against the cwd) and returns the file URL of the JavaScript module. */
export async function compileServiceModule(source: string | URL, opts: CompileServiceOptions = {}): Promise<URL> {
  const file = source instanceof URL || source.startsWith("file:") ? fileURLToPath(source) : path.resolve(source);
  const text = readFileSync(file, "utf8");
  const hash = createHash("sha256").update(file).update("\0").update(text).digest("hex").slice(0, 16);
  const out = path.join(opts.outDir ?? path.join(hearthHome(), "modules"), hash, path.basename(file).replace(/\.[mc]?tsx?$/, "") + ".js");
  if (!existsSync(out)) {
    const ts = (await import("typescript")).default;
    const js = ts.transpileModule(text, {
      fileName: file,
      reportDiagnostics: true,
      compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022, sourceMap: false, verbatimModuleSyntax: false },
    });
    const errors = (js.diagnostics ?? []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length > 0) {
      throw new Error(`cannot compile ${file}: ${errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")).join("; ")}`);
    }
    mkdirSync(path.dirname(out), { recursive: true });
    // Write then rename: two kernels compiling the same source never see a half-written module.
    const tmp = `${out}.${process.pid}.tmp`;
    writeFileSync(tmp, `// compiled by hearth from ${file}\n${js.outputText}`);
    renameSync(tmp, out);
  }
  return pathToFileURL(out);
}
