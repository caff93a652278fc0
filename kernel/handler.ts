/**
 * The interface between the protocol (router) and a language: what a kernel
 * must answer, in the content shapes of the Jupyter messaging spec. The router
 * owns channels, status and replies; a handler only computes answers and
 * publishes side effects (streams, displays, results) through its context.
 *
 * Spec: https://jupyter-client.readthedocs.io/en/stable/messaging.html
 */
import type { HistoryItem, HistoryRequest } from "./history.js";

export type { HistoryItem, HistoryRequest };

/** A MIME bundle: MIME type → data (text/plain always present in ours). */
export type MimeBundle = Record<string, unknown>;

/** Content of an execute_request. */
export interface ExecuteRequest {
  code: string;
  silent: boolean;
  store_history: boolean;
  user_expressions: Record<string, string>;
  allow_stdin: boolean;
  stop_on_error: boolean;
}

/** Content of an execute_reply. */
export type ExecuteReply =
  | { status: "ok"; execution_count: number; user_expressions: Record<string, unknown>; payload: unknown[] }
  | { status: "error"; execution_count: number; ename: string; evalue: string; traceback: string[] };

/** Content of an is_complete_reply. */
export interface IsCompleteReply {
  status: "complete" | "incomplete" | "invalid" | "unknown";
  indent?: string;
}

/** Content of a complete_reply. */
export interface CompleteReply {
  status: "ok";
  matches: string[];
  cursor_start: number;
  cursor_end: number;
  metadata: Record<string, unknown>;
}

/** Content of an inspect_reply. */
export interface InspectReply {
  status: "ok";
  found: boolean;
  data: MimeBundle;
  metadata: Record<string, unknown>;
}

/** Content of a kernel_info_reply (status and protocol_version are added by the router). */
export interface KernelInfo {
  implementation: string;
  implementation_version: string;
  language_info: { name: string; version: string; mimetype: string; file_extension: string; [k: string]: unknown };
  banner: string;
  help_links: Array<{ text: string; url: string }>;
}

/** One pending input_request: its answer, and a way to stop waiting (interrupt). */
export interface PendingInput {
  readonly reply: Promise<string>;
  cancel(reason: Error): void;
}

/** What a handler may do while answering one request: publish iopub messages whose parent is that request. */
export interface RequestContext {
  publish(msgType: string, content: Record<string, unknown>, metadata?: Record<string, unknown>, buffers?: Uint8Array[]): void;
  /**
   * Sends an input_request to the client's stdin socket; null when the
   * request did not allow stdin (allow_stdin false) or is not an execute_request.
   */
  requestInput: ((prompt: string, password: boolean) => PendingInput) | null;
}

/** A language implementation behind the protocol layer. */
export interface KernelHandler {
  kernelInfo(): KernelInfo;
  /** Runs one cell. Must not throw for user errors: those are an "error" reply. */
  execute(req: ExecuteRequest, ctx: RequestContext): Promise<ExecuteReply>;
  isComplete(code: string): IsCompleteReply;
  complete(code: string, cursorPos: number): CompleteReply;
  inspect(code: string, cursorPos: number, detailLevel: number): InspectReply;
  /** Stored inputs for a history_request (tail, range or search). */
  history(req: HistoryRequest): HistoryItem[];
  /** A comm_open, comm_msg or comm_close from the front end (no reply); `ctx` publishes with it as parent. */
  comm(msgType: "comm_open" | "comm_msg" | "comm_close", content: Record<string, unknown>, buffers: Uint8Array[], ctx: RequestContext): void;
  /** comm_info_reply's `comms`: the open comms, or those of one target. */
  commInfo(targetName?: string): Record<string, { target_name: string }>;
  /** Stops the running cell, if any; the kernel stays usable. */
  interrupt(): void;
  /** Releases the language's resources before the process exits. */
  close(): void;
}
