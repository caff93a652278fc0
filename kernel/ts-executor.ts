/**
 * TypeScript cell semantics from tslab 1.0.22 (pinned): its converter turns a
 * cell into JavaScript that keeps declarations across cells, supports
 * top-level await and local `.ts` imports, and type-checks against earlier
 * cells; its executor runs that code in this process. tslab reports results
 * through a console-like object, which we pass in to capture them as data:
 * `log(value)` is the last expression's value, `error(e)` a thrown error,
 * `error("%s%d:%d - %s", …)` a type-check diagnostic. Nothing of tslab's
 * protocol layer is used (see docs/kernel.md).
 */
import { createRequire } from "node:module";
import { format } from "node:util";
import { createConverter, isCompleteCode, type Converter } from "tslab/dist/converter.js";
import { createExecutor, type ConverterSet, type Executor } from "tslab/dist/executor.js";
import { printQuickInfo } from "tslab/dist/inspect.js";
import { forwardHearthTypes } from "./hearth-imports.js";

const DIAGNOSTIC_FORMAT = "%s%d:%d - %s";

/** The TypeScript tslab compiles with (5.0.4), for syntax checks that must agree with its compiler. */
const ts = createRequire(createRequire(import.meta.url).resolve("tslab/package.json"))("@tslab/typescript-for-tslab") as typeof import("typescript");

/** Syntax errors that more input can still fix: an unterminated template literal or comment. */
const CONTINUABLE = new Set([1160, 1010]);

/** The error of a failed cell in the shape of a Jupyter error message. */
export interface CellError {
  ename: string;
  evalue: string;
  traceback: string[];
}

/** What running one cell produced. */
export type CellOutcome =
  | { ok: true; hasValue: boolean; value: unknown; warnings: string[] }
  | { ok: false; error: CellError };

/** Completion candidates replacing `code.slice(start, end)`. */
export interface Completion {
  start: number;
  end: number;
  candidates: string[];
}

/** Runs TypeScript cells one at a time in this process. */
export class TypeScriptExecutor {
  private readonly executor: Executor;
  private capture = { hasValue: false, value: undefined as unknown, errors: [] as unknown[], diagnostics: [] as string[] };
  private running = false;
  private readonly unforward: () => void;

  /** `rootDir` resolves imports (node_modules, local .ts files); normally the notebook's directory. */
  constructor(rootDir: string) {
    // tslab's converter type-checks relative to the process's cwd: `import "hearth"` must resolve there.
    this.unforward = forwardHearthTypes(ts.sys, ts.sys.getCurrentDirectory());
    let browser: Converter | undefined;
    const node = createConverter({ isJS: false, isBrowser: false });
    const convs: ConverterSet = {
      node,
      // Only `//%browser` cells use this converter; creating it costs a second TypeScript program.
      get browser() {
        return (browser ??= createConverter({ isJS: false, isBrowser: true }));
      },
      close: () => {
        node.close();
        browser?.close();
      },
    };
    this.executor = createExecutor(rootDir, convs, {
      log: (value: unknown) => {
        this.capture.hasValue = true;
        this.capture.value = value;
      },
      error: (first: unknown, ...rest: unknown[]) => {
        if (first === DIAGNOSTIC_FORMAT) this.capture.diagnostics.push(format(first, ...rest));
        else this.capture.errors.push(first);
      },
    });
  }

  /** True while a cell runs (its promise has not settled). */
  get busy(): boolean {
    return this.running;
  }

  /** Type-checks and runs one cell. Never rejects for errors in the cell. */
  async execute(code: string): Promise<CellOutcome> {
    this.capture = { hasValue: false, value: undefined, errors: [], diagnostics: [] };
    this.running = true;
    let ok: boolean;
    try {
      // tslab runs the cell's synchronous part in vm with breakOnSigint, before its first await: that part is
      // over once execute() has returned its promise.
      const done = this.executor.execute(code);
      rearmSigint();
      ok = await done;
    } catch (err) {
      ok = false;
      this.capture.errors.push(err);
    } finally {
      this.running = false;
    }
    const { hasValue, value, errors, diagnostics } = this.capture;
    if (ok) return { ok: true, hasValue, value, warnings: diagnostics };
    if (errors.length > 0) return { ok: false, error: describeError(errors[0]) };
    return {
      ok: false,
      error: { ename: "TypeScriptError", evalue: diagnostics[0] ?? "the cell did not compile", traceback: diagnostics.length > 0 ? diagnostics : ["the cell did not compile"] },
    };
  }

  /** Rejects the awaited promise of a running asynchronous cell (synchronous code is stopped by SIGINT itself). */
  interrupt(): void {
    this.executor.interrupt();
  }

  /**
   * Jupyter's is_complete: "incomplete" with an indent while brackets or
   * statements are open, "invalid" when the parser reports an error that no
   * further input can fix (`const = 1`, a stray `}`), else "complete".
   */
  isComplete(code: string): { status: "complete" | "incomplete" | "invalid"; indent?: string } {
    const r = isCompleteCode(code);
    if (!r.completed) return { status: "incomplete", indent: r.indent ?? "" };
    const out = ts.transpileModule(code, { reportDiagnostics: true, compilerOptions: { target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.ESNext } });
    const syntax = (out.diagnostics ?? []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (syntax.length === 0) return { status: "complete" };
    return syntax.every((d) => CONTINUABLE.has(d.code)) ? { status: "incomplete", indent: "" } : { status: "invalid" };
  }

  /** Completions at `cursor` from the TypeScript language service, seeing earlier cells' declarations. */
  complete(code: string, cursor: number): Completion {
    const c = this.executor.complete(code, cursor);
    return { start: c.start, end: c.end, candidates: c.candidates };
  }

  /** Quick info (type and doc comment) at `cursor`, or null. */
  inspect(code: string, cursor: number): string | null {
    const info = this.executor.inspect(code, cursor);
    return info ? printQuickInfo(info) : null;
  }

  /** Releases the TypeScript programs. */
  close(): void {
    this.executor.close();
    this.unforward();
  }
}

/** Stack frames of the kernel itself (below the cell), left out of tracebacks. */
const KERNEL_FRAME = /^\s+at .*(node:vm|node:internal|tslab[\\/]dist[\\/]|[\\/]kernel[\\/](ts-executor|ts-handler|router|sockets|kernel)\.js)/;

/**
 * Installs Node's SIGINT handler again, keeping every listener. A listener
 * added while vm's breakOnSigint watchdog is up (the synchronous part of a
 * cell: `run.train()` watches for the stop button so) leaves the process
 * without a handler once the watchdog ends, and the next interrupt (Jupyter's
 * stop button: SIGINT) kills the kernel (measured: Node 20, a cell
 * `process.on("SIGINT", f); await sleep()` then an interrupt: the kernel
 * died of SIGINT). Removing every listener and adding them back makes Node
 * install its handler afresh.
 */
function rearmSigint(): void {
  const listeners = process.listeners("SIGINT");
  process.removeAllListeners("SIGINT");
  for (const l of listeners) process.on("SIGINT", l);
}

/** Jupyter's error triple for a thrown value; interrupts are named "KeyboardInterrupt" as in other kernels. */
export function describeError(thrown: unknown): CellError {
  if (thrown instanceof Error || (typeof thrown === "object" && thrown !== null && "message" in thrown && "stack" in thrown)) {
    const e = thrown as Error & { code?: string };
    const interrupted = e.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED" || e.message === "Interrupted asynchronously";
    if (interrupted) {
      // Its stack is tslab's and vm's frames: a front end shows the traceback, so say what happened instead.
      const evalue = e.message === "Interrupted asynchronously" ? "interrupted while the cell awaited (what it started may go on in the background)" : "interrupted";
      return { ename: "KeyboardInterrupt", evalue, traceback: [`KeyboardInterrupt: ${evalue}`] };
    }
    const ename = e.name || "Error";
    const stack = typeof e.stack === "string" && e.stack.length > 0 ? e.stack : `${ename}: ${e.message}`;
    return { ename, evalue: String(e.message), traceback: stack.split("\n").filter((line) => !KERNEL_FRAME.test(line)) };
  }
  const text = format("%O", thrown);
  return { ename: "Error", evalue: `non-Error thrown: ${text}`, traceback: [`Uncaught ${text}`] };
}
