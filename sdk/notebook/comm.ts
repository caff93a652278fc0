/**
 * Jupyter comms from notebook code: a two-way channel between an object in
 * the kernel and one in the front end (comm_open, comm_msg, comm_close), the
 * transport ipywidgets and other interactive outputs use. The kernel
 * registers a CommSink under `Symbol.for("hearth.comm-sink")`; outside a
 * notebook there is none and `openComm` throws (use `commsAvailable()` to
 * decide).
 *
 * Spec: https://jupyter-client.readthedocs.io/en/stable/messaging.html#custom-messages
 */

/** Where a running kernel provides comms (set on globalThis by the kernel). */
export const COMM_SINK: unique symbol = Symbol.for("hearth.comm-sink") as never;

/** JSON data of a comm message. */
export type CommData = Record<string, unknown>;

/** One open comm. Messages from the front end arrive in `onMessage` handlers, even while a cell awaits. */
export interface Comm {
  readonly commId: string;
  readonly targetName: string;
  /** True once either side closed it. */
  readonly closed: boolean;
  /** Sends comm_msg to the front end; throws CommClosedError once closed. */
  send(data: CommData, metadata?: Record<string, unknown>, buffers?: Uint8Array[]): void;
  /** Sends comm_close (idempotent). */
  close(data?: CommData): void;
  /** Calls `handler` for every comm_msg from the front end; returns the unsubscribe. */
  onMessage(handler: (data: CommData, buffers: Uint8Array[]) => void): () => void;
  /** Calls `handler` once when the front end closes the comm. */
  onClose(handler: (data: CommData) => void): void;
}

/** Options of openComm. */
export interface OpenCommOptions {
  data?: CommData;
  metadata?: Record<string, unknown>;
  buffers?: Uint8Array[];
  /** A comm_id of your choice (default a random UUID). */
  commId?: string;
}

/** The kernel side: opens comms and routes front-end-opened ones to registered targets. */
export interface CommSink {
  open(targetName: string, opts: OpenCommOptions): Comm;
  /** `handler` receives each comm the front end opens with `targetName` (and its comm_open data). */
  registerTarget(targetName: string, handler: (comm: Comm, data: CommData) => void): void;
  unregisterTarget(targetName: string): void;
}

/** A send on a comm that is closed. */
export class CommClosedError extends Error {
  override name = "CommClosedError";
}

/** There is no kernel to open a comm with (plain Node process). */
export class NoCommsError extends Error {
  override name = "NoCommsError";
}

/** The running kernel's comms, or undefined outside a notebook. */
export function commSink(): CommSink | undefined {
  return (globalThis as Record<symbol, CommSink | undefined>)[COMM_SINK];
}

/** True when comms can be opened (inside the hearth kernel). */
export function commsAvailable(): boolean {
  return commSink() !== undefined;
}

/** Opens a comm to the front end's `targetName`. */
export function openComm(targetName: string, opts: OpenCommOptions = {}): Comm {
  const sink = commSink();
  if (!sink) throw new NoCommsError(`openComm('${targetName}'): comms need the hearth notebook kernel; this is a plain Node process`);
  return sink.open(targetName, opts);
}

/** Handles comms the front end opens with `targetName`. */
export function registerCommTarget(targetName: string, handler: (comm: Comm, data: CommData) => void): void {
  const sink = commSink();
  if (!sink) throw new NoCommsError(`registerCommTarget('${targetName}'): comms need the hearth notebook kernel; this is a plain Node process`);
  sink.registerTarget(targetName, handler);
}
