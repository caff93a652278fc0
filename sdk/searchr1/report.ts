/**
 * The run report: a plain-text summary table for the terminal and a
 * self-contained HTML page (inline SVG curves, no scripts) in --out.
 */
import { writeFileSync } from "node:fs";
import path from "node:path";
import type { StepMetrics } from "./run.js";

/** Evaluation points and run facts for the summary. */
export interface ReportFacts {
  start: { step: number; em: number; searches: number };
  final: { step: number; em: number; searches: number };
  seconds: number;
  options: Record<string, unknown>;
}

function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

/** The summary table printed at the end of a run. */
export function summaryTable(history: StepMetrics[], f: ReportFacts): string {
  const evals = history.filter((m) => m.eval_em !== undefined);
  const lines = [
    "step  held-out EM  searches/sample  train reward  elapsed",
    "----  -----------  ---------------  ------------  -------",
    `${String(f.start.step).padStart(4)}  ${pct(f.start.em).padStart(11)}  ${f.start.searches.toFixed(2).padStart(15)}  ${"-".padStart(12)}  ${"-".padStart(7)}`,
  ];
  let elapsed = 0;
  const at = new Map<number, number>();
  for (const m of history) at.set(m.step, (elapsed += m.step_s));
  for (const m of evals) {
    lines.push(`${String(m.step).padStart(4)}  ${pct(m.eval_em!).padStart(11)}  ${(m.eval_searches ?? 0).toFixed(2).padStart(15)}  ${m.reward_mean.toFixed(3).padStart(12)}  ${`${Math.round(at.get(m.step) ?? 0)} s`.padStart(7)}`);
  }
  if (!evals.some((m) => m.step === f.final.step)) {
    lines.push(`${String(f.final.step).padStart(4)}  ${pct(f.final.em).padStart(11)}  ${f.final.searches.toFixed(2).padStart(15)}  ${"-".padStart(12)}  ${`${Math.round(elapsed)} s`.padStart(7)}`);
  }
  lines.push("", `held-out EM ${pct(f.start.em)} → ${pct(f.final.em)} in ${history.length} steps; searches/sample ${f.start.searches.toFixed(2)} → ${f.final.searches.toFixed(2)}; total ${Math.round(f.seconds)} s`);
  return lines.join("\n");
}

function svgCurve(title: string, points: Array<[number, number]>, yMax: number, fmt: (y: number) => string): string {
  const W = 520;
  const H = 220;
  const pad = 40;
  if (points.length === 0) return `<figure><figcaption>${title}: no data</figcaption></figure>`;
  const xMax = Math.max(1, ...points.map((p) => p[0]));
  const x = (v: number): number => pad + (v / xMax) * (W - 2 * pad);
  const y = (v: number): number => H - pad - (v / yMax) * (H - 2 * pad);
  const d = points.map((p, i) => `${i === 0 ? "M" : "L"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
  const ticks = [0, 0.5, 1].map((t) => `<text x="4" y="${y(t * yMax) + 4}" font-size="11">${fmt(t * yMax)}</text>`).join("");
  return `<figure><figcaption>${title}</figcaption><svg width="${W}" height="${H}" xmlns="http://www.w3.org/2000/svg">
<rect x="${pad}" y="${pad}" width="${W - 2 * pad}" height="${H - 2 * pad}" fill="none" stroke="#ccc"/>${ticks}
<text x="${W - pad}" y="${H - 10}" font-size="11" text-anchor="end">step ${xMax}</text>
<path d="${d}" fill="none" stroke="#d9480f" stroke-width="2"/>${points.map((p) => `<circle cx="${x(p[0]).toFixed(1)}" cy="${y(p[1]).toFixed(1)}" r="2.5" fill="#d9480f"/>`).join("")}
</svg></figure>`;
}

/** Writes `<out>/report.html`; returns its path and the summary table. */
export function writeReport(out: string, history: StepMetrics[], f: ReportFacts): { file: string; summary: string } {
  const summary = summaryTable(history, f);
  const evalPts: Array<[number, number]> = [[f.start.step, f.start.em], ...history.filter((m) => m.eval_em !== undefined).map((m) => [m.step, m.eval_em!] as [number, number])];
  if (!history.some((m) => m.step === f.final.step && m.eval_em !== undefined)) evalPts.push([f.final.step, f.final.em]);
  const maxSearch = Math.max(1, ...history.map((m) => m.searches_per_sample));
  const html = `<!doctype html><html><head><meta charset="utf-8"><title>hearth Search-R1 report</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px} figure{display:inline-block;margin:1em} pre{background:#f6f6f6;padding:1em}</style></head><body>
<h1>Search-R1 on hearth</h1>
<p>${history.length} steps, ${Math.round(f.seconds)} s. Options: <code>${escapeHtml(JSON.stringify(f.options))}</code></p>
${svgCurve("held-out exact match (greedy)", evalPts, 1, pct)}
${svgCurve("train reward (mean per step)", history.map((m) => [m.step, m.reward_mean]), 1, (v) => v.toFixed(2))}
${svgCurve("searches per sample", history.map((m) => [m.step, m.searches_per_sample]), maxSearch, (v) => v.toFixed(1))}
${svgCurve("step seconds", history.map((m) => [m.step, m.step_s]), Math.max(1, ...history.map((m) => m.step_s)), (v) => v.toFixed(1))}
<h2>Summary</h2><pre>${escapeHtml(summary)}</pre>
</body></html>`;
  const file = path.join(out, "report.html");
  writeFileSync(file, html);
  return { file, summary };
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);
}
