/**
 * Errors raised by the tensor engine link. Python exceptions arrive as an
 * `EngineError` carrying the engine's `code` (e.g. `no_model`,
 * `checkpoint_mismatch`, `bad_patch`, `internal`) and the Python traceback;
 * the link's own failures use the codes `engine_exited`, `closed`,
 * `timeout` (a request past its deadline), `hung` (the process stopped
 * heartbeating), `aborted`, `spawn_failed`, `no_python` and `protocol`.
 */

import { HearthError } from "../errors/index.js";

/** What the engine reports for a failed request (the reply's `error` object). */
export interface EngineErrorInfo {
  code: string;
  message: string;
  /** Python exception class name, when the error came from Python. */
  type?: string;
  /** Python traceback, when the error came from Python. */
  traceback?: string;
}

/** A failed tensor engine request, or the engine process itself failing. */
export class EngineError extends HearthError {
  override name = "EngineError";
  /** Stable machine-readable code. */
  readonly code: string;
  /** The operation that failed (`generate`, `train_step`, …), when known. */
  readonly op: string | undefined;
  /** The Python traceback, when the error came from Python. */
  readonly traceback: string | undefined;
  /** The Python exception class name, when the error came from Python. */
  readonly pythonType: string | undefined;

  constructor(info: EngineErrorInfo, options?: { op?: string; cause?: unknown }) {
    const where = options?.op ? ` (${options.op})` : "";
    super(`[${info.code}]${where} ${info.message}`, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = info.code;
    this.op = options?.op;
    this.traceback = info.traceback;
    this.pythonType = info.type;
  }
}
