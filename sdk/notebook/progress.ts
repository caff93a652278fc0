/**
 * Progress bars. In a notebook one output is replaced in place (display_id +
 * update_display_data) at most every `intervalMs`; in a terminal a single
 * line is redrawn with "\r"; when stdout is not a terminal only the final
 * line is printed, so logs stay readable.
 */
import { DisplayHandle, inNotebook, JUPYTER_DISPLAY, type MimeBundle } from "./display.js";
import { escapeHtml } from "./text.js";

/** Options of a progress bar. */
export interface ProgressOptions {
  /** Shown before the bar. */
  label?: string;
  /** Minimum time between redraws (default 100 ms); the final state is always drawn. */
  intervalMs?: number;
  /** Where terminal output goes (default process.stdout). */
  stream?: NodeJS.WriteStream;
}

/** A snapshot of a bar, rendered as HTML (<progress>) and text. */
export class ProgressView {
  constructor(
    readonly label: string,
    readonly done: number,
    readonly total: number,
    readonly elapsedMs: number,
    readonly note: string,
  ) {}

  /** The bar as text: `label [#####.....] 5/10 50% 1.2 s note`. */
  text(width = 30): string {
    const frac = this.total > 0 ? Math.min(1, this.done / this.total) : 0;
    const filled = Math.round(frac * width);
    const bar = "#".repeat(filled) + ".".repeat(width - filled);
    const parts = [this.label, `[${bar}]`, `${this.done}/${this.total}`, `${Math.round(frac * 100)}%`, `${(this.elapsedMs / 1000).toFixed(1)} s`, this.note];
    return parts.filter(Boolean).join(" ");
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const pct = this.total > 0 ? Math.round(Math.min(1, this.done / this.total) * 100) : 0;
    const html =
      `<div class="hearth-progress" style="font-family: monospace">${escapeHtml(this.label)} ` +
      `<progress value="${this.done}" max="${this.total}" style="width: 240px; vertical-align: middle"></progress> ` +
      `${this.done}/${this.total} (${pct}%) ${(this.elapsedMs / 1000).toFixed(1)} s ${escapeHtml(this.note)}</div>`;
    return { "text/plain": this.text(), "text/html": html };
  }
}

/** A progress bar over `total` steps. */
export class ProgressBar {
  private done = 0;
  private note = "";
  private lastDraw = 0;
  private finished = false;
  private readonly started = Date.now();
  private readonly handle: DisplayHandle | null;
  private readonly opts: Required<Pick<ProgressOptions, "label" | "intervalMs">> & { stream: NodeJS.WriteStream };

  constructor(
    readonly total: number,
    opts: ProgressOptions = {},
  ) {
    this.opts = { label: opts.label ?? "", intervalMs: opts.intervalMs ?? 100, stream: opts.stream ?? process.stdout };
    this.handle = inNotebook() ? new DisplayHandle().show(this.view()) : null;
  }

  /** Steps completed so far. */
  get value(): number {
    return this.done;
  }

  /** Advances by `n` steps (default 1), with an optional note shown after the bar. */
  tick(n = 1, note?: string): void {
    this.update(this.done + n, note);
  }

  /** Sets the number of completed steps. */
  update(done: number, note?: string): void {
    this.done = Math.min(done, this.total);
    if (note !== undefined) this.note = note;
    if (this.done >= this.total) this.finish();
    else if (Date.now() - this.lastDraw >= this.opts.intervalMs) this.draw(false);
  }

  /** Draws the final state (idempotent). */
  finish(note?: string): void {
    const changed = note !== undefined && note !== this.note;
    if (note !== undefined) this.note = note;
    if (this.finished) {
      // A note added after the end still shows in a notebook; a terminal already has its final line.
      if (changed && this.handle) this.handle.update(this.view());
      return;
    }
    this.finished = true;
    this.draw(true);
  }

  /** The current state as a displayable view. */
  view(): ProgressView {
    return new ProgressView(this.opts.label, this.done, this.total, Date.now() - this.started, this.note);
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    return this.view()[JUPYTER_DISPLAY]();
  }

  private draw(final: boolean): void {
    this.lastDraw = Date.now();
    if (this.handle) {
      this.handle.update(this.view());
      return;
    }
    const s = this.opts.stream;
    if (s.isTTY) s.write(`\r${this.view().text()}${final ? "\n" : ""}`);
    else if (final) s.write(this.view().text() + "\n");
  }
}

/** A progress bar over `total` steps. */
export function progress(total: number, opts: ProgressOptions = {}): ProgressBar {
  return new ProgressBar(total, opts);
}

/** Iterates `items` (array or async iterable) while advancing a bar; the bar finishes when iteration ends. */
export async function* withProgress<T>(items: Iterable<T> | AsyncIterable<T>, total: number, opts: ProgressOptions = {}): AsyncGenerator<T> {
  const bar = new ProgressBar(total, opts);
  try {
    for await (const item of items) {
      yield item;
      bar.tick();
    }
  } finally {
    bar.finish();
  }
}
