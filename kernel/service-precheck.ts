/**
 * Before a cell runs, the TypeScript service modules it names in
 * `….service("./services/x.ts#X", …)` are type-checked
 * (sdk/notebook/service-module.ts), so a type error in a service fails the
 * cell with the file and line before any executor is asked to start; the
 * executors themselves load the module through tsx, which does not check
 * types. Only string literals are seen (a reference built at run time is not
 * checked here).
 */
import { createRequire } from "node:module";
import path from "node:path";
import { isTypeScriptModule, typeCheckServiceModule, type ServiceDiagnostic } from "../sdk/runtime/service-module.js";

const ts = createRequire(createRequire(import.meta.url).resolve("tslab/package.json"))("@tslab/typescript-for-tslab") as typeof import("typescript");

/** The module paths of `service("<path>.ts#Export", …)` calls in `code`, in order, without repeats. */
export function serviceModulesIn(code: string): string[] {
  if (!code.includes(".service")) return [];
  const source = ts.createSourceFile("cell.ts", code, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const found = new Set<string>();
  const visit = (node: import("typescript").Node): void => {
    if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression) && node.expression.name.text === "service") {
      const first = node.arguments[0];
      if (first && (ts.isStringLiteral(first) || ts.isNoSubstitutionTemplateLiteral(first))) {
        const hash = first.text.lastIndexOf("#");
        const module = hash > 0 ? first.text.slice(0, hash) : "";
        if (isTypeScriptModule(module)) found.add(module);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return [...found];
}

/** Type errors of the service modules `code` names (paths relative to `rootDir`), shown relative to it. */
export function precheckServices(code: string, rootDir: string): string[] {
  const lines: string[] = [];
  for (const module of serviceModulesIn(code)) {
    const file = path.resolve(rootDir, module);
    let diagnostics: ServiceDiagnostic[];
    try {
      diagnostics = typeCheckServiceModule(file);
    } catch (err) {
      // A missing file is app.service's to report, with its own message.
      if ((err as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw err;
    }
    for (const d of diagnostics) lines.push(`${path.relative(rootDir, d.file) || d.file}:${d.line}:${d.column} - ${d.message}`);
  }
  return lines;
}
