/**
 * The run report: a plain-text summary table for the terminal and a
 * self-contained HTML page in --out (inline SVG, no scripts, nothing
 * fetched): where the command's time went (set-up with the warm start, RL,
 * finish), learning curves, each step's time by phase with the reference's
 * timing table, weight bytes published and fetched, the agreement checks
 * and utilisation, one trajectory with its spans told apart, and the
 * options. Charts are report-svg.ts, tables report-sections.ts.
 */
import { writeFileSync } from "node:fs";
import path from "node:path";
import { callsOf, type EnvWords, type ScoredSample, type StepMetrics } from "../types.js";
import { bytesTable, checksTable, fmtSeconds, optionsTable, pct, phaseTable, trajectorySection } from "./report-sections.js";
import { esc, lineChart, type Series } from "./report-svg.js";
import type { SpanDecoder } from "../notebook/spans.js";

export { pickSample } from "./report-sections.js";

/** One held-out evaluation: EM, tool calls per sample, and EM per item category when the task's questions have them (the chain task: hop counts). */
export interface EvalPoint {
  step: number;
  em: number;
  /** Tool calls per sample. */
  calls: number;
  emBy?: Record<string, number>;
}

/** Evaluation points and run facts for the summary. */
export interface ReportFacts {
  /** The environment: its title ("Search-R1") and how it names its calls. */
  env: { title: string; words: EnvWords };
  start: EvalPoint;
  final: EvalPoint;
  /** The whole command. */
  seconds: number;
  /** Before the first RL step: task, services, the warm start or model load, the first evaluation. */
  setupSeconds: number;
  /** The RL steps this command ran (the sum of their step_s, evaluations included). */
  rlSeconds: number;
  /** The warm start, when this command made one (`steps` supervised steps) or loaded it from the cache. */
  warmStart?: { seconds: number; steps: number; cached: boolean };
  /** The model folder the trainers started from, when no warm start was made (e.g. the recipe's shipped policy). */
  startedFrom?: string;
  options: Record<string, unknown>;
  /** One trajectory to show (pickSample picks it from the last step) and the tokenizer that decodes it. */
  trajectory?: { step: number; sample: ScoredSample; decoder: SpanDecoder };
}

/** The question categories of a run's evaluations (from the first and last evaluation and the history), in order. */
export function evalCategories(history: readonly StepMetrics[], f: Pick<ReportFacts, "start" | "final">): string[] {
  const all = new Set<string>([...Object.keys(f.start.emBy ?? {}), ...history.flatMap((m) => Object.keys(m.eval_em_by ?? {})), ...Object.keys(f.final.emBy ?? {})]);
  return [...all].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
}

/** Held-out EM per category as one line's words: "1 hop 95.0% · 2 hops 50.0%". */
export function emByText(by: Record<string, number> | undefined): string {
  return Object.entries(by ?? {}).sort(([a], [b]) => a.localeCompare(b, "en", { numeric: true })).map(([c, em]) => `${c} ${pct(em)}`).join(" · ");
}

/** One line of a step's metrics, as the CLI prints it. */
export function stepRow(m: StepMetrics): string {
  const ev = m.eval_em !== undefined ? `  eval EM ${(m.eval_em * 100).toFixed(1)}%${m.eval_em_by ? ` (${emByText(m.eval_em_by)})` : ""}` : "";
  const c = callsOf(m);
  return `step ${String(m.step).padStart(3)}  reward ${m.reward_mean.toFixed(3)}  EM ${(m.em * 100).toFixed(1)}%  ${c.word} ${c.perSample.toFixed(2)}  kept ${m.groups_kept}  ${m.step_s.toFixed(1)} s${ev}`;
}

/** The summary table printed at the end of a run: a row per evaluation, with a column per question category when there are some. */
export function summaryTable(history: StepMetrics[], f: ReportFacts): string {
  const evals = history.filter((m) => m.eval_em !== undefined);
  const cats = evalCategories(history, f);
  const widths = cats.map((c) => Math.max(c.length, 6));
  const byCells = (by: Record<string, number> | undefined): string => cats.map((c, i) => `  ${(by?.[c] !== undefined ? pct(by[c]) : "-").padStart(widths[i]!)}`).join("");
  const perSample = `${f.env.words.calls}/sample`;
  const row = (step: number, em: number, by: Record<string, number> | undefined, calls: number, reward: string, elapsed: string): string =>
    `${String(step).padStart(4)}  ${pct(em).padStart(11)}${byCells(by)}  ${calls.toFixed(2).padStart(perSample.length)}  ${reward.padStart(12)}  ${elapsed.padStart(7)}`;
  const lines = [
    `step  held-out EM${cats.map((c, i) => `  ${c.padStart(widths[i]!)}`).join("")}  ${perSample}  train reward  elapsed`,
    `----  -----------${widths.map((w) => `  ${"-".repeat(w)}`).join("")}  ---------------  ------------  -------`,
    row(f.start.step, f.start.em, f.start.emBy, f.start.calls, "-", "-"),
  ];
  let elapsed = 0;
  const at = new Map<number, number>();
  for (const m of history) at.set(m.step, (elapsed += m.step_s));
  for (const m of evals) lines.push(row(m.step, m.eval_em!, m.eval_em_by, callsOf(m, f.env.words.calls).eval ?? 0, m.reward_mean.toFixed(3), `${Math.round(at.get(m.step) ?? 0)} s`));
  if (!evals.some((m) => m.step === f.final.step)) lines.push(row(f.final.step, f.final.em, f.final.emBy, f.final.calls, "-", `${Math.round(elapsed)} s`));
  const warm = f.warmStart ? (f.warmStart.cached ? ", warm start cached" : ` incl. warm start ${Math.round(f.warmStart.seconds)} s`) : "";
  lines.push("", `held-out EM ${pct(f.start.em)} → ${pct(f.final.em)} in ${history.length} steps; ${perSample} ${f.start.calls.toFixed(2)} → ${f.final.calls.toFixed(2)}`);
  if (cats.length > 0) {
    const final = f.final.emBy ?? evals.find((m) => m.step === f.final.step)?.eval_em_by;
    lines.push(`held-out EM by category: ${cats.map((c) => `${c} ${f.start.emBy?.[c] !== undefined ? pct(f.start.emBy[c]) : "-"} → ${final?.[c] !== undefined ? pct(final[c]) : "-"}`).join("; ")}`);
  }
  lines.push(`time: set-up ${Math.round(f.setupSeconds)} s${warm}; RL ${Math.round(f.rlSeconds)} s; total ${Math.round(f.seconds)} s`);
  return lines.join("\n");
}

const COLOR = { orange: "#d9480f", blue: "#1c7ed6", green: "#2b8a3e", purple: "#7048e8", grey: "#868e96", teal: "#0c8599" };

const tick = (v: number): string => String(Number(v.toPrecision(4)));

function points(history: StepMetrics[], get: (m: StepMetrics) => number | undefined): Array<[number, number]> {
  return history.flatMap((m) => {
    const v = get(m);
    return v === undefined || !Number.isFinite(v) ? [] : [[m.step, v] as [number, number]];
  });
}

/** The largest binary unit the values reach, to label a bytes axis in round numbers of it. */
function byteUnit(max: number): { div: number; name: string } {
  const names = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (i < names.length - 1 && max >= 1024 ** (i + 1)) i++;
  return { div: 1024 ** i, name: names[i]! };
}

function learningCharts(history: StepMetrics[], f: ReportFacts): string[] {
  const evalPts: Array<[number, number]> = [[f.start.step, f.start.em], ...points(history, (m) => m.eval_em)];
  if (!history.some((m) => m.step === f.final.step && m.eval_em !== undefined) && f.final.step !== f.start.step) evalPts.push([f.final.step, f.final.em]);
  const calls = f.env.words.calls;
  const evalCalls: Array<[number, number]> = [[f.start.step, f.start.calls], ...points(history, (m) => callsOf(m, calls).eval)];
  const maxReward = Math.max(0, ...history.map((m) => m.reward_mean));
  const cats = evalCategories(history, f);
  const palette = [COLOR.green, COLOR.blue, COLOR.purple, COLOR.teal, COLOR.grey, COLOR.orange];
  const byCategory = cats.map((c, i): Series => {
    const pts: Array<[number, number]> = [...(f.start.emBy?.[c] !== undefined ? [[f.start.step, f.start.emBy[c]] as [number, number]] : []), ...points(history, (m) => m.eval_em_by?.[c])];
    if (f.final.emBy?.[c] !== undefined && !pts.some(([s]) => s === f.final.step)) pts.push([f.final.step, f.final.emBy[c]]);
    return { label: c, color: palette[i % palette.length]!, points: pts, dashed: i % 2 === 1 };
  });
  return [
    lineChart({ id: "fig-em", caption: "Held-out exact match (greedy)", series: [{ label: "held-out EM", color: COLOR.orange, points: evalPts }], yFormat: (v) => `${Math.round(v * 100)}%`, yMin: 0, yMax: 1 }),
    ...(cats.length > 0 ? [lineChart({ id: "fig-em-by", caption: "Held-out exact match by question category (greedy)", series: byCategory, yFormat: (v) => `${Math.round(v * 100)}%`, yMin: 0, yMax: 1 })] : []),
    lineChart({
      id: "fig-reward",
      caption: "Train reward and exact match (mean per step)",
      series: [
        { label: "reward", color: COLOR.orange, points: points(history, (m) => m.reward_mean) },
        { label: "exact match", color: COLOR.blue, points: points(history, (m) => m.em), dashed: true },
      ],
      yFormat: tick,
      yMin: 0,
      yMax: maxReward <= 1 ? 1 : undefined,
    }),
    lineChart({
      id: "fig-groups",
      caption: "Prompt groups per step: kept (rewards differ) and dropped",
      series: [
        { label: "kept", color: COLOR.green, points: points(history, (m) => m.groups_kept) },
        { label: "dropped", color: COLOR.grey, points: points(history, (m) => m.groups_dropped), dashed: true },
      ],
      yFormat: tick,
      yInteger: true,
    }),
    lineChart({
      id: "fig-calls",
      caption: `${calls[0]!.toUpperCase()}${calls.slice(1)} per sample`,
      series: [
        { label: "train (sampled)", color: COLOR.orange, points: points(history, (m) => callsOf(m, calls).perSample) },
        { label: "held-out (greedy)", color: COLOR.blue, points: evalCalls, dashed: true },
      ],
      yFormat: tick,
    }),
  ];
}

function phaseChart(history: StepMetrics[]): string {
  const series: Series[] = [
    { label: "step", color: COLOR.grey, points: points(history, (m) => m.step_s) },
    { label: "rollout", color: COLOR.blue, points: points(history, (m) => m.rollout_s) },
    { label: "update", color: COLOR.orange, points: points(history, (m) => m.update_s - (m.publish_s ?? 0)) },
    { label: "publish", color: COLOR.green, points: points(history, (m) => m.publish_s) },
    { label: "sync", color: COLOR.purple, points: points(history, (m) => m.sync_s), dashed: true },
  ];
  return lineChart({ id: "fig-phases", caption: "Seconds per step, by phase", series, yFormat: (v) => `${tick(v)} s`, width: 1120 });
}

function utilChart(history: StepMetrics[]): string {
  return lineChart({
    id: "fig-util",
    caption: "Utilisation (busy seconds over step time × executors)",
    series: [
      { label: "rollouts", color: COLOR.blue, points: points(history, (m) => m.rollout_util) },
      { label: "trainers", color: COLOR.orange, points: points(history, (m) => m.trainer_util) },
    ],
    yFormat: (v) => `${Math.round(v * 100)}%`,
    yMin: 0,
    yMax: Math.max(...history.map((m) => Math.max(m.rollout_util ?? 0, m.trainer_util ?? 0))) <= 1 ? 1 : undefined,
  });
}

function bytesChart(history: StepMetrics[]): string {
  const unit = byteUnit(Math.max(0, ...history.map((m) => Math.max(m.publish_bytes, m.sync_bytes))));
  return lineChart({
    id: "fig-bytes",
    caption: "Weight bytes per step: published and fetched",
    series: [
      { label: "published (rank 0)", color: COLOR.orange, points: points(history, (m) => m.publish_bytes / unit.div) },
      { label: "fetched (all rollouts)", color: COLOR.blue, points: points(history, (m) => m.sync_bytes / unit.div), dashed: true },
    ],
    yFormat: (v) => `${tick(v)} ${unit.name}`,
    yInteger: unit.div === 1,
  });
}

function agreementChart(history: StepMetrics[]): string {
  return lineChart({
    id: "fig-kl",
    caption: "KL to the reference and the sampler/trainer logprob gap",
    series: [
      { label: "KL", color: COLOR.orange, points: points(history, (m) => m.kl) },
      { label: "gap mean", color: COLOR.blue, points: points(history, (m) => m.logprob_gap), right: true },
      { label: "gap max", color: COLOR.teal, points: points(history, (m) => m.logprob_gap_max), right: true, dashed: true },
    ],
    yFormat: tick,
    yLabel: "KL per token",
    rightLabel: "|Δ logprob|",
  });
}

/** Where the command's time went: set-up (with the warm start), RL steps, and the finish (the rest). */
function timeTable(f: ReportFacts): string {
  const total = f.seconds;
  const share = (s: number): string => (total > 0 ? pct(s / total) : "–");
  const finish = Math.max(0, total - f.setupSeconds - f.rlSeconds);
  const w = f.warmStart;
  const warm = !w
    ? `<tr class="warm"><td class="sub">warm start</td><td>–</td><td></td><td class="note">none in this command (${f.startedFrom ? `started from ${esc(f.startedFrom)}` : "a model folder, a checkpoint, or a run reattached to"})</td></tr>`
    : `<tr class="warm"><td class="sub">of which the warm start</td><td>${fmtSeconds(w.seconds)}</td><td>${share(w.seconds)}</td><td class="note">${w.cached ? "loaded from the cache in HEARTH_HOME (made by an earlier run)" : `${w.steps} supervised steps on demonstrations, then cached in HEARTH_HOME`}</td></tr>`;
  const rows = [
    `<tr class="setup"><th>set-up</th><td>${fmtSeconds(f.setupSeconds)}</td><td>${share(f.setupSeconds)}</td><td class="note">task, services, the warm start or model load, first publication, first evaluation</td></tr>`,
    warm,
    `<tr class="rl"><th>RL</th><td>${fmtSeconds(f.rlSeconds)}</td><td>${share(f.rlSeconds)}</td><td class="note">the steps this command ran (the sum of their step times, evaluations included)</td></tr>`,
    `<tr class="finish"><th>finish</th><td>${fmtSeconds(finish)}</td><td>${share(finish)}</td><td class="note">final evaluation, checkpoint, report</td></tr>`,
    `<tr class="total"><th>whole command</th><td>${fmtSeconds(total)}</td><td>${share(total)}</td><td></td></tr>`,
  ];
  return `<table class="num" id="time-table"><thead><tr><th>part</th><th>seconds</th><th>share</th><th></th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

const CSS = `body{font:14px/1.45 system-ui,sans-serif;color:#222;max-width:1180px;margin:24px auto;padding:0 20px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 8px;padding-bottom:4px;border-bottom:1px solid #ddd}
.lede{color:#444;margin:0 0 8px}nav a{margin-right:14px;color:#1c7ed6;text-decoration:none}
.figs{display:flex;flex-wrap:wrap;gap:12px 28px}figure{margin:0}figcaption{font-weight:600;margin:6px 0 2px}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
thead th{border-bottom:2px solid #ccc;white-space:nowrap}table.num thead th{text-align:right}table.num thead th:first-child{text-align:left}table.num td{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.num td.note,td.note{text-align:left;color:#666;font-size:12px;white-space:normal;max-width:460px}table.num td.na{color:#999;text-align:center}
p.note{color:#666;font-size:12px;max-width:460px}td.sub{padding-left:24px;color:#444}tr.total th,tr.total td{border-top:2px solid #ccc;font-weight:600}
table.options{align-self:flex-start;min-width:420px}table.options code{white-space:pre-wrap;word-break:break-word}table.facts th{width:190px;color:#444;font-weight:600}
.chip{padding:1px 7px;border-radius:3px;margin-right:6px;font-size:12px}
.trajectory{overflow-wrap:anywhere;font-family:ui-monospace,Menlo,monospace;font-size:12.5px;white-space:pre-wrap;line-height:1.8;border:1px solid #ddd;border-radius:4px;padding:10px 12px}
.hearth-span{border-radius:2px;padding:1px 0}pre{background:#f6f6f6;padding:12px;overflow-x:auto;font-size:12.5px}.empty{color:#999}`;

/** Writes `<out>/report.html`; returns its path and the summary table. */
export function writeReport(out: string, history: StepMetrics[], f: ReportFacts): { file: string; summary: string } {
  const summary = summaryTable(history, f);
  const o = f.options;
  const who = [o.model !== undefined ? `model ${String(o.model)}` : "", o.data !== undefined ? `data ${String(o.data)}` : "", o.rollouts !== undefined ? `${String(o.rollouts)} rollout executor(s), ${String(o.trainers)} trainer(s)` : ""].filter(Boolean);
  const lede = `${history.length} RL steps · held-out EM ${pct(f.start.em)} → ${pct(f.final.em)} · ${f.env.words.calls}/sample ${f.start.calls.toFixed(2)} → ${f.final.calls.toFixed(2)} · ${Math.round(f.seconds)} s in all${who.length ? ` · ${who.map(esc).join(" · ")}` : ""}`;
  const t = f.trajectory;
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>hearth ${esc(f.env.title)} report</title><style>${CSS}</style></head><body>
<h1>${esc(f.env.title)} on hearth</h1>
<p class="lede">${lede}</p>
<nav><a href="#time">time</a><a href="#learning">learning</a><a href="#phases">step phases</a><a href="#weights">weights</a><a href="#agreement">agreement</a><a href="#trajectory">trajectory</a><a href="#summary">summary</a><a href="#options">options</a></nav>
<section id="time"><h2>Where the time went</h2>${timeTable(f)}</section>
<section id="learning"><h2>Learning</h2><div class="figs">${learningCharts(history, f).join("\n")}</div></section>
<section id="phases"><h2>Step time by phase</h2>${phaseChart(history)}${phaseTable(history)}</section>
<section id="weights"><h2>Weights published and fetched</h2><div class="figs">${bytesChart(history)}<div>${bytesTable(history)}</div></div></section>
<section id="agreement"><h2>Agreement checks and utilisation</h2><div class="figs">${agreementChart(history)}${utilChart(history)}</div>${checksTable(history)}</section>
<section id="trajectory"><h2>One trajectory</h2>${t ? trajectorySection(t, f.env.words) : `<p class="empty">no step's samples were held by this command</p>`}</section>
<section id="summary"><h2>Summary</h2><pre>${esc(summary)}</pre></section>
<section id="options"><h2>Options</h2>${optionsTable(f.options)}</section>
</body></html>`;
  const file = path.join(out, "report.html");
  writeFileSync(file, html);
  return { file, summary };
}
