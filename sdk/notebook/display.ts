/**
 * The display protocol. An object renders in a notebook through a
 * `[Symbol.for("Jupyter.display")]()` method returning a MIME bundle that
 * always has `text/plain`; `display()` sends such a bundle to the kernel (or
 * prints its text outside a notebook), and a `DisplayHandle` replaces it in
 * place (Jupyter's display_id + update_display_data).
 *
 * The kernel registers a `DisplaySink` under `Symbol.for("hearth.display-sink")`
 * on globalThis while it runs; the SDK looks it up at each call, so the SDK
 * never imports the kernel and works unchanged in a plain Node process.
 */
import { randomUUID } from "node:crypto";
import { inspect } from "node:util";

/** The method key objects implement to render themselves. */
export const JUPYTER_DISPLAY: unique symbol = Symbol.for("Jupyter.display") as never;

/** Where a running kernel receives displays (set on globalThis by the kernel). */
export const DISPLAY_SINK: unique symbol = Symbol.for("hearth.display-sink") as never;

/** MIME type → data. hearth's bundles always include text/plain. */
export type MimeBundle = Record<string, unknown> & { "text/plain": string };

/** An object that renders itself in a notebook. */
export interface Displayable {
  [JUPYTER_DISPLAY](): MimeBundle;
}

/** Options of one display message. */
export interface DisplayOptions {
  /** Jupyter display_id; a later update with the same id replaces the output in place. */
  displayId?: string;
  /** Send update_display_data (replace) instead of display_data (append). */
  update?: boolean;
  metadata?: Record<string, unknown>;
}

/** The kernel side of the protocol: publishes a bundle as display_data or update_display_data. */
export interface DisplaySink {
  display(bundle: MimeBundle, opts: DisplayOptions): void;
  /** Clears the running cell's output (Jupyter clear_output); `wait` defers it until the next output arrives. */
  clearOutput?(wait: boolean): void;
  /** Shows `bundle` in the front end's pager (an execute_reply payload with source "page"). */
  page?(bundle: MimeBundle): void;
  /** Asks the front end for a line (Jupyter input_request); rejects at once when the cell may not read stdin. */
  input?(prompt: string, password: boolean): Promise<string>;
}

/** True when `value` has a `Symbol.for("Jupyter.display")` method. */
export function isDisplayable(value: unknown): value is Displayable {
  return (typeof value === "object" || typeof value === "function") && value !== null && typeof (value as Partial<Displayable>)[JUPYTER_DISPLAY] === "function";
}

/** The bundle for any value: its own rendering if it has one (text/plain filled in if missing), else util.inspect text. */
export function toMimeBundle(value: unknown): MimeBundle {
  if (isDisplayable(value)) {
    const bundle = value[JUPYTER_DISPLAY]();
    return { ...bundle, "text/plain": typeof bundle["text/plain"] === "string" ? bundle["text/plain"] : inspect(value, { depth: 4 }) };
  }
  return { "text/plain": typeof value === "string" ? inspect(value) : inspect(value, { depth: 4, colors: false }) };
}

/** The running kernel's sink, or undefined outside a notebook. */
export function displaySink(): DisplaySink | undefined {
  return (globalThis as Record<symbol, DisplaySink | undefined>)[DISPLAY_SINK];
}

/** True inside a hearth notebook kernel. */
export function inNotebook(): boolean {
  return displaySink() !== undefined;
}

/** One output area that can be replaced in place. */
export class DisplayHandle {
  /** The Jupyter display_id of this output. */
  readonly displayId: string;

  constructor(displayId: string = randomUUID()) {
    this.displayId = displayId;
  }

  /** Shows `value` (a new output area carrying this handle's display_id). */
  show(value: unknown): this {
    emit(toMimeBundle(value), { displayId: this.displayId });
    return this;
  }

  /** Replaces what this handle shows with `value`. */
  update(value: unknown): this {
    emit(toMimeBundle(value), { displayId: this.displayId, update: true });
    return this;
  }
}

/** Displays `value` now; returns a handle that can replace it in place later. */
export function display(value: unknown, opts: { displayId?: string } = {}): DisplayHandle {
  return new DisplayHandle(opts.displayId).show(value);
}

function emit(bundle: MimeBundle, opts: DisplayOptions): void {
  const sink = displaySink();
  if (sink) sink.display(bundle, opts);
  else if (!opts.update) process.stdout.write(bundle["text/plain"] + "\n");
}
