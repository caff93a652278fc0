/**
 * Routes requests by msg_type to a KernelHandler and wraps each in iopub
 * `status: busy` / `status: idle`. Shell requests run one at a time in arrival
 * order; control requests (interrupt, shutdown, kernel_info) are answered at
 * once, even while a cell runs. A failed cell never aborts later requests.
 */
import type { Channel, KernelSockets } from "./sockets.js";
import type { HistoryRequest, KernelHandler, PendingInput, RequestContext } from "./handler.js";
import { PROTOCOL_VERSION, replyTo, type JupyterMessage } from "./wire.js";
import { randomUUID } from "node:crypto";

/** Shell messages of comms: they have no reply. */
const COMM_MESSAGES = new Set(["comm_open", "comm_msg", "comm_close"]);

/** Why the router stopped: the client asked for a shutdown (and maybe a restart). */
export interface ShutdownRequest {
  restart: boolean;
}

/** Dispatches messages from the sockets to the handler. */
export class Router {
  readonly session = randomUUID();
  private shellQueue: Promise<void> = Promise.resolve();
  private resolveShutdown!: (r: ShutdownRequest) => void;
  /** Resolves when a shutdown_request has been answered. */
  readonly shutdown = new Promise<ShutdownRequest>((resolve) => (this.resolveShutdown = resolve));
  /** The most recent request, parent of output produced outside any request (background promises). */
  lastParent: JupyterMessage | null = null;
  /** The input_request waiting for its input_reply (one cell runs at a time, so at most one). */
  private waitingInput: { resolve: (value: string) => void; reject: (err: Error) => void; askedBy: JupyterMessage } | null = null;
  /** True while an execute_request runs. */
  private executing = false;

  constructor(
    private readonly sockets: KernelSockets,
    private readonly handler: KernelHandler,
    private readonly log: (line: string) => void,
  ) {}

  /** Starts listening; publishes `status: starting` once. */
  start(): void {
    this.publish(null, "status", { execution_state: "starting" });
    this.sockets.listen({
      onMessage: (channel, msg) => {
        if (channel === "control") {
          this.handle(channel, msg).catch((err: unknown) => this.log(`control reply failed: ${String(err)}`));
        } else if (this.executing && COMM_MESSAGES.has(msg.header.msg_type)) {
          // A widget event (a stop button) must reach the running cell between its awaits, not wait behind it.
          // The kernel is already busy, so no status of its own (a busy/idle pair would show the kernel idle mid-cell).
          this.comm(msg);
        } else {
          this.shellQueue = this.shellQueue.then(() => this.handle(channel, msg)).catch((err: unknown) => this.log(`shell reply failed: ${String(err)}`));
        }
      },
      onStdin: (msg) => this.onStdin(msg),
      onBadMessage: (channel, err) => this.log(`dropped a message on ${channel}: ${err.message}`),
    });
  }

  /** Publishes an iopub message whose parent is `parent` (or the last request when null). */
  publish(parent: JupyterMessage | null, msgType: string, content: Record<string, unknown>, metadata: Record<string, unknown> = {}, buffers: Uint8Array[] = []): void {
    const msg = { ...replyTo(parent ?? this.lastParent, msgType, content, this.session, []), metadata, buffers: buffers.map((b) => Buffer.from(b.buffer, b.byteOffset, b.byteLength)) };
    this.sockets.publish(msg).catch((err: unknown) => this.log(`iopub send failed: ${String(err)}`));
  }

  private context(msg: JupyterMessage): RequestContext {
    return { publish: (type, content, metadata, buffers) => this.publish(msg, type, content, metadata, buffers), requestInput: null };
  }

  /** A comm message from the front end: no reply. */
  private comm(msg: JupyterMessage): void {
    this.handler.comm(msg.header.msg_type as "comm_open" | "comm_msg" | "comm_close", msg.content, msg.buffers, this.context(msg));
  }

  /**
   * An input_reply answers the pending input_request. jupyter_client sends it
   * without a parent header, so it is matched by being the only one pending,
   * unless the client made it before the request that asked: stdin and shell
   * are separate connections, so a late answer to an interrupted prompt can
   * arrive after the next cell's execute_request and its new prompt. Both
   * dates come from the same client's clock (the prompt goes to the client
   * that sent the request).
   */
  private onStdin(msg: JupyterMessage): void {
    if (msg.header.msg_type !== "input_reply") {
      this.log(`ignoring ${msg.header.msg_type} on stdin`);
      return;
    }
    const waiting = this.waitingInput;
    if (!waiting) {
      this.log("ignoring an input_reply: no input_request is pending (interrupted?)");
      return;
    }
    if (madeBefore(msg, waiting.askedBy)) {
      this.log("ignoring an input_reply made before the request now asking (a late answer to an interrupted prompt)");
      return;
    }
    this.waitingInput = null;
    waiting.resolve(String(msg.content.value ?? ""));
  }

  /** Sends an input_request to the client that sent `parent` (its stdin socket shares the shell identity). */
  private requestInput(parent: JupyterMessage, prompt: string, password: boolean): PendingInput {
    this.waitingInput?.reject(new Error("a newer input_request replaced this one"));
    let entry!: { resolve: (value: string) => void; reject: (err: Error) => void; askedBy: JupyterMessage };
    const reply = new Promise<string>((resolve, reject) => (entry = { resolve, reject, askedBy: parent }));
    this.waitingInput = entry;
    this.sockets.sendStdin(replyTo(parent, "input_request", { prompt, password }, this.session)).catch((err: unknown) => {
      if (this.waitingInput === entry) this.waitingInput = null;
      entry.reject(new Error(`input_request could not be sent: ${String(err)}`));
    });
    return {
      reply,
      cancel: (reason) => {
        if (this.waitingInput === entry) this.waitingInput = null;
        entry.reject(reason);
      },
    };
  }

  private async handle(channel: Channel, msg: JupyterMessage): Promise<void> {
    const type = msg.header.msg_type;
    if (channel === "shell") this.lastParent = msg;
    this.publish(msg, "status", { execution_state: "busy" });
    try {
      const reply = await this.dispatch(channel, msg);
      if (reply) await this.sockets.reply(channel, replyTo(msg, type.replace(/_request$/, "_reply"), reply, this.session));
    } catch (err) {
      // A handler bug, not a user error: answer with an error reply so the client does not hang.
      const e = err instanceof Error ? err : new Error(String(err));
      this.log(`${type} failed: ${e.stack ?? e.message}`);
      await this.sockets.reply(channel, replyTo(msg, type.replace(/_request$/, "_reply"), { status: "error", ename: e.name, evalue: e.message, traceback: [] }, this.session));
    } finally {
      this.publish(msg, "status", { execution_state: "idle" });
    }
    if (type === "shutdown_request") this.resolveShutdown({ restart: Boolean(msg.content.restart) });
  }

  private async dispatch(_channel: Channel, msg: JupyterMessage): Promise<Record<string, unknown> | null> {
    const c = msg.content;
    switch (msg.header.msg_type) {
      case "kernel_info_request":
        return { status: "ok", protocol_version: PROTOCOL_VERSION, ...this.handler.kernelInfo() };
      case "execute_request": {
        const ctx: RequestContext = {
          ...this.context(msg),
          requestInput: c.allow_stdin ? (prompt, password) => this.requestInput(msg, prompt, password) : null,
        };
        const req = {
          code: String(c.code ?? ""),
          silent: Boolean(c.silent),
          store_history: c.store_history === undefined ? true : Boolean(c.store_history),
          user_expressions: (c.user_expressions ?? {}) as Record<string, string>,
          allow_stdin: Boolean(c.allow_stdin),
          stop_on_error: c.stop_on_error === undefined ? true : Boolean(c.stop_on_error),
        };
        this.executing = true;
        try {
          return { ...(await this.handler.execute(req, ctx)) };
        } finally {
          this.executing = false;
        }
      }
      case "is_complete_request":
        return { ...this.handler.isComplete(String(c.code ?? "")) };
      case "complete_request":
        return { ...this.handler.complete(String(c.code ?? ""), Number(c.cursor_pos ?? String(c.code ?? "").length)) };
      case "inspect_request":
        return { ...this.handler.inspect(String(c.code ?? ""), Number(c.cursor_pos ?? 0), Number(c.detail_level ?? 0)) };
      case "interrupt_request":
        this.handler.interrupt();
        return { status: "ok" };
      case "shutdown_request":
        return { status: "ok", restart: Boolean(c.restart) };
      case "comm_info_request":
        return { status: "ok", comms: this.handler.commInfo(typeof c.target_name === "string" ? c.target_name : undefined) };
      case "comm_open":
      case "comm_msg":
      case "comm_close":
        this.comm(msg);
        return null;
      case "history_request":
        return { status: "ok", history: this.handler.history(c as unknown as HistoryRequest) };
      default:
        this.log(`ignoring unsupported ${msg.header.msg_type}`);
        return null;
    }
  }
}

/** Whether `msg`'s header date is earlier than `than`'s (false where either has none that parses). */
function madeBefore(msg: JupyterMessage, than: JupyterMessage): boolean {
  const a = microseconds(msg.header.date);
  const b = microseconds(than.header.date);
  return a !== null && b !== null && a < b;
}

/** An ISO 8601 date in microseconds since the epoch (jupyter_client writes six fraction digits; Date.parse keeps three). */
function microseconds(date: unknown): number | null {
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(.*)$/.exec(String(date ?? ""));
  const ms = m ? Date.parse(m[1]! + m[3]!) : NaN;
  return Number.isFinite(ms) ? ms * 1000 + Number((m![2] ?? "").padEnd(6, "0").slice(0, 6)) : null;
}
