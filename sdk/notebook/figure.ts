/**
 * Figures as plotly documents. One output carries three renderings:
 * `application/vnd.plotly.v1+json` (JupyterLab and VS Code draw it natively),
 * `text/html` that draws it with plotly.js (inlined from the
 * plotly.js-dist-min package into the first figure of the notebook, so an
 * exported HTML file renders offline), and a text summary.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { JUPYTER_DISPLAY, type MimeBundle } from "./display.js";
import { escapeHtml } from "./text.js";

/** The MIME type of plotly figures in Jupyter. */
export const PLOTLY_MIME = "application/vnd.plotly.v1+json";

/** One plotly trace (see https://plotly.com/javascript/reference/). */
export type Trace = Record<string, unknown> & { type?: string; name?: string };

/** Plotly layout options (title, axes, size…). */
export type Layout = Record<string, unknown>;

/** Options of a figure. */
export interface FigureOptions {
  layout?: Layout;
  config?: Record<string, unknown>;
}

// Process-wide (the kernel is one notebook): whether plotly.js was already inlined.
const INLINED = Symbol.for("hearth.notebook.plotly-inlined");

function plotlyScriptOnce(): string {
  const g = globalThis as Record<symbol, boolean | undefined>;
  if (g[INLINED]) return "";
  g[INLINED] = true;
  const file = createRequire(import.meta.url).resolve("plotly.js-dist-min/plotly.min.js");
  // "</script" cannot occur inside an inline script; plotly.min.js contains none, but guard anyway.
  return `<script type="text/javascript">${readFileSync(file, "utf8").replace(/<\/script/gi, "<\\/script")}</script>`;
}

/** A plotly figure that renders in notebooks, in exported HTML and as text. */
export class Figure {
  readonly data: Trace[];
  readonly layout: Layout;
  readonly config: Record<string, unknown>;

  constructor(data: Trace[], opts: FigureOptions = {}) {
    this.data = data;
    this.layout = opts.layout ?? {};
    this.config = { responsive: true, ...(opts.config ?? {}) };
  }

  /** A one-line description: title and traces with their point counts. */
  summary(): string {
    const title = layoutTitle(this.layout);
    const traces = this.data.map((t) => {
      const n = Array.isArray(t.y) ? t.y.length : Array.isArray(t.x) ? t.x.length : Array.isArray(t.values) ? t.values.length : 0;
      return `${t.name ?? t.type ?? "trace"} (${t.type ?? "scatter"}, ${n} points)`;
    });
    return `Figure${title ? ` "${title}"` : ""}: ${traces.join(", ") || "no traces"}`;
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const id = `hearth-plot-${randomUUID()}`;
    const json = JSON.stringify({ data: this.data, layout: this.layout, config: this.config }).replace(/</g, "\\u003c");
    const html =
      plotlyScriptOnce() +
      `<div id="${id}" class="hearth-figure" style="min-height: 360px"></div>` +
      `<script type="text/javascript">(function () { var f = ${json}; ` +
      `function draw() { if (window.Plotly) { window.Plotly.newPlot(${JSON.stringify(id)}, f.data, f.layout, f.config); } else { setTimeout(draw, 50); } } draw(); })();</script>` +
      `<noscript>${escapeHtml(this.summary())}</noscript>`;
    return { "text/plain": this.summary(), "text/html": html, [PLOTLY_MIME]: { data: this.data, layout: this.layout, config: this.config } };
  }
}

function layoutTitle(layout: Layout): string {
  const t = layout.title;
  if (typeof t === "string") return t;
  if (t && typeof t === "object" && typeof (t as { text?: unknown }).text === "string") return (t as { text: string }).text;
  return "";
}

/** A figure from traces. */
export function figure(data: Trace[], opts: FigureOptions = {}): Figure {
  return new Figure(data, opts);
}

/** A line chart of one or more named series over their index (or `x`). */
export function lineChart(series: Record<string, number[]>, opts: { title?: string; x?: number[]; xTitle?: string; yTitle?: string } = {}): Figure {
  const data = Object.entries(series).map(([name, y]) => ({ type: "scatter", mode: "lines+markers", name, x: opts.x ?? y.map((_, i) => i), y }));
  return new Figure(data, { layout: { title: { text: opts.title ?? "" }, xaxis: { title: { text: opts.xTitle ?? "" } }, yaxis: { title: { text: opts.yTitle ?? "" } } } });
}

/** A bar chart of labelled values. */
export function barChart(values: Record<string, number>, opts: { title?: string; yTitle?: string } = {}): Figure {
  return new Figure([{ type: "bar", name: opts.yTitle ?? "value", x: Object.keys(values), y: Object.values(values) }], {
    layout: { title: { text: opts.title ?? "" }, yaxis: { title: { text: opts.yTitle ?? "" } } },
  });
}
