/**
 * Type-checking a TypeScript service module before executors load it.
 * Executors load `.ts` services through tsx (cluster-agent/executor-host.ts),
 * which strips types without checking them; this check runs where the driver
 * is, so a type error stops `app.service("./services/x.ts#X", …)` with its
 * file and line instead of surfacing (or not) inside a warm executor.
 *
 * The module and every `.ts` file it imports are checked strictly with the
 * TypeScript the kernel uses (tslab's), as bundler-style ESM: relative
 * imports may name `./x.js`, `./x.ts` or `./x`; `hearth` and
 * `hearth/<sub>` resolve to this checkout's declarations; Node's types come
 * from this checkout. Results are cached per file until one of the checked
 * files changes.
 */
import { statSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { HearthError, type ErrorIds } from "../errors/index.js";

type TS = typeof import("typescript");

/** This checkout's root (dist/sdk/notebook/ → ../../../). */
const CHECKOUT = fileURLToPath(new URL("../../../", import.meta.url));

let tsModule: TS | undefined;
function typescript(): TS {
  const req = createRequire(import.meta.url);
  return (tsModule ??= createRequire(req.resolve("tslab/package.json"))("@tslab/typescript-for-tslab") as TS);
}

/** One type error: where, and what. */
export interface ServiceDiagnostic {
  file: string;
  line: number;
  column: number;
  code: number;
  message: string;
}

/** A service module does not type-check; `diagnostics` lists every error with its file and line. */
export class ServiceTypeError extends HearthError {
  override name = "ServiceTypeError";

  constructor(
    readonly module: string,
    readonly diagnostics: ServiceDiagnostic[],
  ) {
    super(`service module ${module} has ${diagnostics.length} type error(s):\n${diagnostics.map(formatDiagnostic).join("\n")}`);
  }
  override ids(): ErrorIds {
    return { module: this.module };
  }
}

/** `file:line:column - message (TScode)`. */
export function formatDiagnostic(d: ServiceDiagnostic): string {
  return `${d.file}:${d.line}:${d.column} - ${d.message} (TS${d.code})`;
}

const cache = new Map<string, { stamps: Array<[string, number]>; diagnostics: ServiceDiagnostic[] }>();

/** True for a path the executors load through tsx. */
export function isTypeScriptModule(file: string): boolean {
  return /\.[mc]?tsx?$/.test(file) && !/\.d\.[mc]?ts$/.test(file);
}

/** The type errors of `file` (a .ts path, relative to the cwd) and of the .ts files it imports; [] when it checks. */
export function typeCheckServiceModule(file: string): ServiceDiagnostic[] {
  const abs = path.resolve(file);
  const hit = cache.get(abs);
  if (hit && hit.stamps.every(([f, t]) => mtime(f) === t)) return hit.diagnostics;
  const ts = typescript();
  const options: import("typescript").CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    allowImportingTsExtensions: true,
    esModuleInterop: true,
    skipLibCheck: true,
    lib: ["lib.es2022.d.ts"],
    types: ["node"],
    typeRoots: [path.join(CHECKOUT, "node_modules", "@types")],
    paths: {
      hearth: [path.join(CHECKOUT, "dist", "sdk", "index.d.ts")],
      "hearth/*": [path.join(CHECKOUT, "dist", "sdk", "*", "index.d.ts")],
    },
  };
  const program = ts.createProgram([abs], options);
  const diagnostics = ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.category === ts.DiagnosticCategory.Error)
    .map((d): ServiceDiagnostic => {
      const message = ts.flattenDiagnosticMessageText(d.messageText, "\n");
      if (!d.file || d.start === undefined) return { file: abs, line: 1, column: 1, code: d.code, message };
      const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
      return { file: path.normalize(d.file.fileName), line: line + 1, column: character + 1, code: d.code, message };
    });
  const checked = program
    .getSourceFiles()
    .map((f) => path.normalize(f.fileName))
    .filter((f) => !f.includes(`${path.sep}node_modules${path.sep}`) && !f.startsWith(path.join(CHECKOUT, "dist")));
  cache.set(abs, { stamps: checked.map((f) => [f, mtime(f)]), diagnostics });
  return diagnostics;
}

/** Throws ServiceTypeError when `file` does not type-check. */
export function checkServiceModule(file: string): void {
  const diagnostics = typeCheckServiceModule(file);
  if (diagnostics.length > 0) throw new ServiceTypeError(path.resolve(file), diagnostics);
}

function mtime(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return -1;
  }
}
