/**
 * A live training chart with a Stop button, for any loop that takes an
 * AbortSignal: the monitor yields `signal`, accepts points, and redraws.
 *
 * ```ts
 * const monitor = trainingMonitor({ title: "Search-R1", metrics: ["reward_mean", "em"] });
 * monitor.show();
 * await run.train(50, { signal: monitor.signal, onStep: (r) => monitor.push(r.metrics) });
 * monitor.finish();
 * ```
 *
 * In the hearth kernel it is a widget (widgets.ts: an HTML chart, a Stop
 * button and a status line in a VBox, over comms): the chart updates while
 * the cell still runs, and Stop aborts `signal`, so a loop that checks it
 * ends after the step in flight. Where no widget manager renders it
 * (nbclient, an exported file), the same output carries an HTML and text
 * snapshot, refreshed when the monitor stops or finishes. Outside a notebook
 * it draws nothing; `signal` still works with `stop()`.
 */
import { DisplayHandle, JUPYTER_DISPLAY, type MimeBundle } from "./display.js";
import { commsAvailable } from "./comm.js";
import { boxWidget, buttonWidget, htmlWidget, labelWidget, WIDGET_VIEW_MIME, type WidgetModel } from "./widgets.js";
import { escapeHtml } from "./text.js";

/** One point: its step and any numeric metrics (other fields are ignored); an interface such as StepMetrics fits. */
export type TrainingPoint = { readonly step: number };

/** Options of trainingMonitor(). */
export interface TrainingMonitorOptions {
  title?: string;
  /** Metrics drawn, one small chart each (default: every numeric field of the first point except `step`, at most 4). */
  metrics?: string[];
  /** Minimum time between chart redraws (default 200 ms); finish() and stop() always redraw. */
  intervalMs?: number;
}

/** The widgets of one monitor, opened at its first display. */
interface Views {
  chart: WidgetModel;
  button: WidgetModel;
  status: WidgetModel;
  root: WidgetModel;
}

/** A chart of training metrics with a Stop button that aborts `signal`. */
export class TrainingMonitor {
  /** Aborted by the Stop button or stop(); pass it to the training loop. */
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private readonly points: Array<TrainingPoint & Record<string, unknown>> = [];
  private views: Views | null = null;
  private handle: DisplayHandle | null = null;
  private lastDraw = 0;
  private finished = false;
  private note = "";

  constructor(private readonly opts: TrainingMonitorOptions = {}) {
    this.signal = this.controller.signal;
  }

  /** The points so far, oldest first. */
  get history(): ReadonlyArray<TrainingPoint & Record<string, unknown>> {
    return this.points;
  }

  /** True once Stop was pressed or stop() called. */
  get stopped(): boolean {
    return this.signal.aborted;
  }

  /** Shows the monitor as an output of the running cell (what `display(monitor)` does, keeping a handle for the snapshot). */
  show(): this {
    this.handle = new DisplayHandle().show(this);
    return this;
  }

  /** Adds a point (any object with a numeric `step`: StepMetrics, or a literal with more fields) and redraws (at most every intervalMs). */
  push<P extends TrainingPoint>(point: P): void {
    if (!Number.isFinite(point.step)) throw new RangeError(`TrainingMonitor.push: point.step must be a number; got ${String(point.step)}`);
    this.points.push({ ...point } as TrainingPoint & Record<string, unknown>);
    if (Date.now() - this.lastDraw >= (this.opts.intervalMs ?? 200)) this.redraw();
  }

  /** Aborts `signal` as the Stop button does; the loop ends after its current step. */
  stop(reason = "stopped"): void {
    if (this.signal.aborted) return;
    this.controller.abort(new Error(`training ${reason}`));
    this.note = "stopping after the current step…";
    this.views?.button.set({ disabled: true, description: "Stopping…" });
    this.redraw();
  }

  /** Marks the end: the final chart, the button disabled, the snapshot refreshed. */
  finish(note?: string): void {
    this.finished = true;
    this.note = note ?? (this.stopped ? `stopped at step ${this.lastStep() ?? 0}` : "finished");
    this.views?.button.set({ disabled: true, description: this.stopped ? "Stopped" : "Done" });
    this.redraw();
    this.handle?.update(this);
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const bundle: MimeBundle = { "text/plain": this.text(), "text/html": this.html() };
    if (commsAvailable()) bundle[WIDGET_VIEW_MIME] = this.openViews().root.viewData();
    return bundle;
  }

  /** The state as one line: last step, last value of each metric, and the note. */
  text(): string {
    const last = this.points.at(-1);
    const values = last ? this.metrics().map((m) => `${m} ${fmt(last[m])}`) : [];
    return [`${this.opts.title ?? "training"}:`, last ? `step ${last.step}` : "no steps yet", ...values].join(" ") + (this.note ? ` (${this.note})` : "");
  }

  /** The charts as HTML: one inline SVG per metric. */
  html(): string {
    const title = this.opts.title ? `<div><b>${escapeHtml(this.opts.title)}</b></div>` : "";
    const charts = this.metrics().map((m) => sparkChart(m, this.points));
    return `<div class="hearth-training" style="font-family: monospace">${title}<div style="display: flex; flex-wrap: wrap; gap: 8px">${charts.join("")}</div><div>${escapeHtml(this.text())}</div></div>`;
  }

  private lastStep(): number | undefined {
    return this.points.at(-1)?.step;
  }

  private metrics(): string[] {
    if (this.opts.metrics) return this.opts.metrics;
    const first = this.points[0];
    if (!first) return [];
    return Object.keys(first).filter((k) => k !== "step" && typeof first[k] === "number").slice(0, 4);
  }

  private openViews(): Views {
    if (this.views) return this.views;
    const chart = htmlWidget(this.html());
    const button = buttonWidget("Stop", { buttonStyle: "danger", icon: "stop", tooltip: "end training after the current step" });
    const status = labelWidget(this.text());
    const root = boxWidget("column", [chart, boxWidget("row", [button, status])]);
    button.onCustom((content) => {
      if (content.event === "click") this.stop("stopped from the notebook");
    });
    this.views = { chart, button, status, root };
    if (this.finished || this.stopped) button.set({ disabled: true });
    return this.views;
  }

  private redraw(): void {
    this.lastDraw = Date.now();
    if (!this.views) return;
    this.views.chart.set({ value: this.html() });
    this.views.status.set({ value: this.text() });
  }
}

/** A monitor (not yet shown: call show() or display it). */
export function trainingMonitor(opts: TrainingMonitorOptions = {}): TrainingMonitor {
  return new TrainingMonitor(opts);
}

function fmt(v: unknown): string {
  return typeof v === "number" ? String(Number(v.toPrecision(4))) : "–";
}

/** A 240×90 line chart of one metric over steps, with its range and last value. */
function sparkChart(metric: string, points: ReadonlyArray<TrainingPoint & Record<string, unknown>>): string {
  const w = 240;
  const h = 90;
  const pad = 6;
  const pts = points.filter((p) => typeof p[metric] === "number" && Number.isFinite(p[metric])).map((p) => [p.step, p[metric] as number] as const);
  const head = `<div><div>${escapeHtml(metric)} ${pts.length ? fmt(pts.at(-1)![1]) : "–"}</div>`;
  if (pts.length === 0) return `${head}<svg width="${w}" height="${h}"></svg></div>`;
  const xs = pts.map((p) => p[0]);
  const ys = pts.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = (x: number) => pad + ((x - x0) / (x1 - x0 || 1)) * (w - 2 * pad);
  const sy = (y: number) => h - pad - ((y - y0) / (y1 - y0 || 1)) * (h - 2 * pad);
  const line = pts.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
  return (
    `${head}<svg width="${w}" height="${h}" style="background: #fafafa; border: 1px solid #ddd">` +
    `<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="${line}"/>` +
    `<text x="${pad}" y="12" font-size="10" fill="#666">${fmt(y1)}</text><text x="${pad}" y="${h - pad}" font-size="10" fill="#666">${fmt(y0)}</text>` +
    `</svg></div>`
  );
}
