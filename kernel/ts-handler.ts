/**
 * The TypeScript KernelHandler: maps cells run by TypeScriptExecutor onto
 * Jupyter messages (execute_input, stream, display_data,
 * update_display_data, execute_result, error). stdout and stderr of this
 * process are cell output while the kernel runs; output produced after a cell
 * finished (background promises, timers) goes to the last cell, as in
 * ipykernel.
 */
import { DISPLAY_SINK, toMimeBundle, type DisplaySink } from "../sdk/notebook/display.js";
import { COMM_SINK } from "../sdk/notebook/comm.js";
import { StdinNotAllowedError } from "../sdk/notebook/input.js";
import { CommManager } from "./comms.js";
import { precheckServices } from "./service-precheck.js";
import type { CompleteReply, ExecuteReply, ExecuteRequest, HistoryItem, HistoryRequest, InspectReply, IsCompleteReply, KernelHandler, KernelInfo, PendingInput, RequestContext } from "./handler.js";
import type { HistoryStore } from "./history.js";
import { describeError, TypeScriptExecutor } from "./ts-executor.js";

type Write = typeof process.stdout.write;

/** Options of a TypeScriptHandler. */
export interface TypeScriptHandlerOptions {
  /** Resolves imports; the notebook's directory (the kernel's cwd under Jupyter). */
  rootDir: string;
  /** The kernel's own log (stderr as it was before cells took it over). */
  log: (line: string) => void;
  /** The TypeScript version tslab compiles with, shown in kernel_info. */
  typescriptVersion: string;
  implementationVersion: string;
  /** Where executed cells are kept for history_request; null keeps none (history answers empty). */
  history: HistoryStore | null;
}

/** Runs TypeScript cells and publishes their outputs. */
export class TypeScriptHandler implements KernelHandler {
  private readonly executor: TypeScriptExecutor;
  private executionCount = 0;
  /** Where output goes: the running cell, else the last one. */
  private target: RequestContext | null = null;
  private readonly restore: Array<() => void> = [];
  /** Pager payloads of the running cell (page() calls), sent in its execute_reply. */
  private payloads: Array<Record<string, unknown>> = [];
  /** The running cell's request, while it runs (input() is allowed only then). */
  private running: RequestContext | null = null;
  private pendingInput: PendingInput | null = null;
  /** The front end's comm message being handled, parent of what its handlers send. */
  private commParent: RequestContext | null = null;
  private readonly comms: CommManager;

  constructor(private readonly opts: TypeScriptHandlerOptions) {
    this.executor = new TypeScriptExecutor(opts.rootDir);
    this.comms = new CommManager((type, content, metadata, buffers) => {
      // The running cell, else the comm message being handled, else the last cell (a send from a timer).
      const ctx = this.running ?? this.commParent ?? this.target;
      if (ctx) ctx.publish(type, content, metadata, buffers);
      else opts.log(`${type} dropped: no request to attach it to yet`);
    }, opts.log);
  }

  /** Takes over stdout/stderr, the display sink and unhandled errors of this process. Undone by close(). */
  install(): void {
    for (const name of ["stdout", "stderr"] as const) {
      const stream = process[name];
      const original = stream.write;
      stream.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
        const text = typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
        if (this.target) this.target.publish("stream", { name, text });
        else this.opts.log(text.trimEnd());
        const cb = rest.find((r) => typeof r === "function") as (() => void) | undefined;
        if (cb) queueMicrotask(cb);
        return true;
      }) as Write;
      this.restore.push(() => (stream.write = original));
    }
    const sink: DisplaySink = {
      display: (bundle, o) => {
        if (!this.target) return;
        const content = { data: bundle, metadata: o.metadata ?? {}, transient: o.displayId ? { display_id: o.displayId } : {} };
        this.target.publish(o.update ? "update_display_data" : "display_data", content);
      },
      clearOutput: (wait) => this.target?.publish("clear_output", { wait }),
      page: (bundle) => void this.payloads.push({ source: "page", data: bundle, start: 0 }),
      input: (prompt, password) => this.input(prompt, password),
    };
    (globalThis as Record<symbol, unknown>)[DISPLAY_SINK] = sink;
    this.restore.push(() => delete (globalThis as Record<symbol, unknown>)[DISPLAY_SINK]);
    (globalThis as Record<symbol, unknown>)[COMM_SINK] = this.comms;
    this.restore.push(() => delete (globalThis as Record<symbol, unknown>)[COMM_SINK]);
    // A rejected promise nobody awaits must not kill the kernel: report it in the notebook instead.
    const onAsyncError = (err: unknown) => {
      const e = describeError(err);
      this.target?.publish("stream", { name: "stderr", text: `Unhandled: ${e.traceback.join("\n")}\n` });
    };
    process.on("unhandledRejection", onAsyncError);
    process.on("uncaughtException", onAsyncError);
    this.restore.push(() => {
      process.off("unhandledRejection", onAsyncError);
      process.off("uncaughtException", onAsyncError);
    });
  }

  kernelInfo(): KernelInfo {
    return {
      implementation: "hearth",
      implementation_version: this.opts.implementationVersion,
      language_info: {
        name: "typescript",
        version: this.opts.typescriptVersion,
        mimetype: "text/typescript",
        file_extension: ".ts",
        pygments_lexer: "typescript",
        codemirror_mode: { name: "javascript", typescript: true },
      },
      banner: `hearth TypeScript kernel (TypeScript ${this.opts.typescriptVersion}, Node ${process.version})`,
      help_links: [],
    };
  }

  async execute(req: ExecuteRequest, ctx: RequestContext): Promise<ExecuteReply> {
    if (!req.silent && req.store_history) this.executionCount += 1;
    const count = this.executionCount;
    const stored = !req.silent && req.store_history;
    if (!req.silent) ctx.publish("execute_input", { code: req.code, execution_count: count });
    this.target = ctx;
    this.running = ctx;
    this.payloads = [];
    const serviceErrors = precheckServices(req.code, this.opts.rootDir);
    if (serviceErrors.length > 0) {
      this.running = null;
      if (stored) this.record(count, req.code, null);
      return this.fail(ctx, count, { ename: "TypeScriptError", evalue: `service module: ${serviceErrors[0]}`, traceback: serviceErrors });
    }
    const outcome = await this.executor.execute(req.code).finally(() => (this.running = null));
    const payload = this.payloads.splice(0);
    if (outcome.ok) {
      for (const w of outcome.warnings) ctx.publish("stream", { name: "stderr", text: w + "\n" });
      let result: string | null = null;
      if (outcome.hasValue && !req.silent) {
        let data: Record<string, unknown>;
        try {
          data = toMimeBundle(outcome.value);
        } catch (err) {
          if (stored) this.record(count, req.code, null);
          return this.fail(ctx, count, describeError(err));
        }
        ctx.publish("execute_result", { execution_count: count, data, metadata: {} });
        result = String(data["text/plain"]);
      }
      if (stored) this.record(count, req.code, result);
      return { status: "ok", execution_count: count, user_expressions: {}, payload };
    }
    if (stored) this.record(count, req.code, null);
    return this.fail(ctx, count, outcome.error);
  }

  /** input() in a cell: an input_request to the front end, if this cell may read stdin. */
  private async input(prompt: string, password: boolean): Promise<string> {
    const ctx = this.running;
    if (!ctx) throw new StdinNotAllowedError(`input(${JSON.stringify(prompt)}): no cell is running (input() after a cell finished has nobody to ask)`);
    if (!ctx.requestInput) {
      throw new StdinNotAllowedError(
        `input(${JSON.stringify(prompt)}): this front end does not accept input for this cell (allow_stdin is false, as with nbclient or a batch run); ` +
          "run the cell in JupyterLab or the notebook, or put the value in the code",
      );
    }
    const pending = ctx.requestInput(prompt, password);
    this.pendingInput = pending;
    try {
      return await pending.reply;
    } finally {
      if (this.pendingInput === pending) this.pendingInput = null;
    }
  }

  /** Keeps a cell for history_request; a disk error is logged, never fails the cell. */
  private record(line: number, input: string, output: string | null): void {
    try {
      this.opts.history?.record(line, input, output);
    } catch (err) {
      this.opts.log(`history not written: ${String(err)}`);
    }
  }

  comm(msgType: "comm_open" | "comm_msg" | "comm_close", content: Record<string, unknown>, buffers: Uint8Array[], ctx: RequestContext): void {
    const before = this.commParent;
    this.commParent = ctx;
    try {
      this.comms.handle(msgType, content, buffers);
    } finally {
      this.commParent = before;
    }
  }

  commInfo(targetName?: string): Record<string, { target_name: string }> {
    return this.comms.info(targetName);
  }

  history(req: HistoryRequest): HistoryItem[] {
    return this.opts.history?.query(req) ?? [];
  }

  private fail(ctx: RequestContext, count: number, error: { ename: string; evalue: string; traceback: string[] }): ExecuteReply {
    ctx.publish("error", { ...error });
    return { status: "error", execution_count: count, ...error };
  }

  isComplete(code: string): IsCompleteReply {
    return this.executor.isComplete(code);
  }

  complete(code: string, cursorPos: number): CompleteReply {
    const c = this.executor.complete(code, cursorPos);
    return { status: "ok", matches: c.candidates, cursor_start: c.start, cursor_end: c.end, metadata: {} };
  }

  inspect(code: string, cursorPos: number): InspectReply {
    const text = this.executor.inspect(code, cursorPos);
    return text === null ? { status: "ok", found: false, data: {}, metadata: {} } : { status: "ok", found: true, data: { "text/plain": text }, metadata: {} };
  }

  interrupt(): void {
    // Stop waiting for an answer first, so the cell's `await input()` ends as interrupted too.
    this.pendingInput?.cancel(Object.assign(new Error("Interrupted asynchronously"), { code: "ERR_SCRIPT_EXECUTION_INTERRUPTED" }));
    if (this.executor.busy) this.executor.interrupt();
  }

  close(): void {
    this.comms.closeAll();
    for (const undo of this.restore.splice(0).reverse()) undo();
    this.executor.close();
  }
}
