/**
 * Line charts as inline SVG for the run report: no scripts, no fonts or
 * files to fetch, so the page reads the same offline. Steps on the x-axis
 * with labelled ticks, labelled y ticks on a light grid, a legend when a
 * chart has more than one series, and an optional right-hand axis for a
 * series whose scale differs from the others'.
 */

/** One line of a chart. */
export interface Series {
  label: string;
  color: string;
  /** (step, value) pairs; drawn in the order given. */
  points: Array<[number, number]>;
  dashed?: boolean;
  /** Plotted against the right-hand axis. */
  right?: boolean;
}

/** What `lineChart` draws. */
export interface ChartOptions {
  /** The element id of the figure (for links and tests). */
  id: string;
  caption: string;
  series: Series[];
  /** Tick labels of the left axis (and of the right one unless `rightFormat`). */
  yFormat: (v: number) => string;
  rightFormat?: (v: number) => string;
  /** Lower and upper bounds of the left axis; default from the data (0 included). */
  yMin?: number;
  yMax?: number;
  /** Left-axis ticks on whole numbers (counts, bytes in B). */
  yInteger?: boolean;
  /** What the axes measure, written beside them. */
  yLabel?: string;
  rightLabel?: string;
  /** Pixels; default 560 (two charts side by side). */
  width?: number;
}

const H = 270;
const FONT = `font-family="system-ui, sans-serif" font-size="11" fill="#444"`;

/**
 * About `count` round tick values (1, 2 or 5 × 10^k apart) covering
 * [lo, hi]; with `integer`, never closer than 1 apart.
 */
export function niceTicks(lo: number, hi: number, count = 5, integer = false): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const steps = [1, 2, 2.5, 5, 10].map((m) => m * mag).filter((s) => !integer || Number.isInteger(s));
  const step = Math.max(integer ? 1 : 0, steps.find((s) => s >= raw) ?? 10 * mag);
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** The axis range of some values: from 0 (or below, for negatives) to a round top above the largest. */
function range(values: number[], lo?: number, hi?: number, integer = false): [number, number] {
  const min = lo ?? Math.min(0, ...values);
  let max = hi ?? Math.max(...values);
  if (!Number.isFinite(max) || max <= min) max = min + 1;
  if (hi !== undefined) return [min, max];
  // Round the top up to the next tick, so the highest line sits under a labelled one.
  const ticks = niceTicks(min, max, 5, integer);
  const step = ticks.length > 1 ? ticks[1]! - ticks[0]! : max - min;
  return [min, Number((Math.ceil(max / step - 1e-9) * step).toPrecision(12))];
}

/** A `<figure>` with the chart, or a caption saying there is nothing to draw. */
export function lineChart(o: ChartOptions): string {
  const series = o.series.filter((s) => s.points.length > 0);
  const caption = `<figcaption>${esc(o.caption)}</figcaption>`;
  if (series.length === 0) return `<figure id="${o.id}" style="width:${o.width ?? 560}px">${caption}<p class="empty">no data</p></figure>`;
  const W = o.width ?? 560;
  const hasRight = series.some((s) => s.right);
  const legend = o.series.length > 1;
  const m = { l: 58, r: hasRight ? 58 : 18, t: legend ? 34 : 14, b: 42 };
  const steps = series.flatMap((s) => s.points.map((p) => p[0]));
  let [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  if (x1 === x0) [x0, x1] = [x0 - 1, x1 + 1];
  const [l0, l1] = range(series.filter((s) => !s.right).flatMap((s) => s.points.map((p) => p[1])), o.yMin, o.yMax, o.yInteger);
  const [r0, r1] = hasRight ? range(series.filter((s) => s.right).flatMap((s) => s.points.map((p) => p[1]))) : [0, 1];
  const px = (v: number): number => m.l + ((v - x0) / (x1 - x0)) * (W - m.l - m.r);
  const py = (v: number, right = false): number => {
    const [a, b] = right ? [r0, r1] : [l0, l1];
    return H - m.b - ((v - a) / (b - a)) * (H - m.t - m.b);
  };
  const parts: string[] = [];
  for (const t of niceTicks(l0, l1, 5, o.yInteger)) {
    const y = py(t).toFixed(1);
    parts.push(`<line x1="${m.l}" x2="${W - m.r}" y1="${y}" y2="${y}" stroke="#e6e6e6"/>`);
    parts.push(`<text x="${m.l - 6}" y="${y}" dy="4" text-anchor="end" ${FONT}>${esc(o.yFormat(t))}</text>`);
  }
  if (hasRight) {
    const fmt = o.rightFormat ?? o.yFormat;
    for (const t of niceTicks(r0, r1, 5)) parts.push(`<text x="${W - m.r + 6}" y="${py(t, true).toFixed(1)}" dy="4" ${FONT}>${esc(fmt(t))}</text>`);
  }
  for (const t of niceTicks(x0, x1, 8, true)) {
    const x = px(t).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${H - m.b}" y2="${H - m.b + 4}" stroke="#888"/>`);
    parts.push(`<text x="${x}" y="${H - m.b + 16}" text-anchor="middle" ${FONT} class="xtick">${t}</text>`);
  }
  parts.push(`<text x="${(m.l + W - m.r) / 2}" y="${H - 6}" text-anchor="middle" ${FONT}>step</text>`);
  if (o.yLabel) parts.push(`<text transform="translate(12 ${(m.t + H - m.b) / 2}) rotate(-90)" text-anchor="middle" ${FONT}>${esc(o.yLabel)}</text>`);
  if (hasRight && o.rightLabel) parts.push(`<text transform="translate(${W - 8} ${(m.t + H - m.b) / 2}) rotate(90)" text-anchor="middle" ${FONT}>${esc(o.rightLabel)}</text>`);
  parts.push(`<path d="M${m.l},${m.t} V${H - m.b} H${W - m.r}${hasRight ? ` V${m.t}` : ""}" fill="none" stroke="#888"/>`);
  const dots = steps.length / series.length <= 40;
  for (const s of series) {
    const d = s.points.map((p, i) => `${i === 0 ? "M" : "L"}${px(p[0]).toFixed(1)},${py(p[1], s.right).toFixed(1)}`).join(" ");
    parts.push(`<path class="series" d="${d}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ` stroke-dasharray="6 4"` : ""} stroke-linejoin="round"/>`);
    if (dots || s.points.length === 1) parts.push(...s.points.map((p) => `<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1], s.right).toFixed(1)}" r="2.6" fill="${s.color}"/>`));
  }
  if (legend) {
    let x = m.l;
    for (const s of o.series) {
      const label = `${s.label}${s.right ? " (right axis)" : ""}`;
      parts.push(`<line x1="${x}" x2="${x + 18}" y1="14" y2="14" stroke="${s.color}" stroke-width="3"${s.dashed ? ` stroke-dasharray="5 3"` : ""}/>`);
      parts.push(`<text x="${x + 23}" y="18" ${FONT} class="legend">${esc(label)}</text>`);
      x = Math.round(x + 23 + label.length * 6.2 + 16);
    }
  }
  const svg = `<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${esc(o.caption)}">${parts.join("")}</svg>`;
  return `<figure id="${o.id}">${caption}${svg}</figure>`;
}

/** HTML-escapes text for element content and attribute values. */
export function esc(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);
}
