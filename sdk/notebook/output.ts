/**
 * Output-area operations besides display: clearing the running cell's output
 * (Jupyter's clear_output) and showing text in the front end's pager (an
 * execute_reply payload with source "page", as IPython's `?` does). Outside a
 * notebook clearOutput does nothing and page prints the text.
 */
import { displaySink, toMimeBundle } from "./display.js";

/** Options of clearOutput. */
export interface ClearOutputOptions {
  /** Keep the old output until the next output arrives, so a redraw loop does not flicker (default false). */
  wait?: boolean;
}

/** Clears the running cell's output area. */
export function clearOutput(opts: ClearOutputOptions = {}): void {
  displaySink()?.clearOutput?.(opts.wait ?? false);
}

/** Shows `value` (its MIME bundle) in the pager, beside the notebook rather than in the cell's output. */
export function page(value: unknown): void {
  const bundle = toMimeBundle(value);
  const sink = displaySink();
  if (sink?.page) sink.page(bundle);
  else process.stdout.write(bundle["text/plain"] + "\n");
}
