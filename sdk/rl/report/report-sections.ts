/**
 * The tables of the run report, each a pure function of the metrics
 * history (or of one sample, or the options) to an HTML fragment: where a
 * step's time goes phase by phase (the reference system's timing table:
 * mean, median and max seconds per phase and its share of the step), the
 * weight bytes published and fetched, the agreement checks and utilisation,
 * one trajectory with its spans told apart, and the options.
 */
import { formatBytes } from "../../format.js";
import type { EnvWords, ScoredSample, StepMetrics } from "../types.js";
import { esc } from "./report-svg.js";
import { SPAN_STYLE, spanCounts, trajectorySpans, type SpanDecoder, type SpanKind } from "../notebook/spans.js";

/** Seconds with the digits that matter: 0.012, 1.25, 14.3, 254. */
export function fmtSeconds(s: number): string {
  if (s === 0) return "0";
  const a = Math.abs(s);
  return s.toFixed(a < 1 ? 3 : a < 10 ? 2 : a < 100 ? 1 : 0);
}

/** A share as a percentage with one decimal. */
export function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}

function sum(xs: number[]): number {
  return xs.reduce((a, b) => a + b, 0);
}

function mean(xs: number[]): number {
  return xs.length === 0 ? 0 : sum(xs) / xs.length;
}

function median(xs: number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** One phase of a step: what it covers and its seconds per step (absent where not measured). */
export interface Phase {
  name: string;
  note: string;
  seconds: (m: StepMetrics) => number | undefined;
  /** Part of another phase's time (not added to the step). */
  within?: boolean;
}

/**
 * The phases of a step. Rollout, update, publish and the rest add up to the
 * step; the weight sync runs inside the rollout calls. The update is the
 * trainers' call without rank 0's publication, which is its own phase.
 */
export const PHASES: Phase[] = [
  { name: "rollout", note: "generation and retrieval until the step's trajectories are in, and scoring (with --max-lag ≥ 1, the wait for rollouts started earlier)", seconds: (m) => m.rollout_s },
  { name: "sync", note: "inside rollout: the longest time one rollout call took to fetch and apply new weights", seconds: (m) => m.sync_s, within: true },
  { name: "update", note: "the trainers' GRPO step (forward, backward, all-reduce, optimizer), without the publication", seconds: (m) => Math.max(0, m.update_s - (m.publish_s ?? 0)) },
  { name: "publish", note: "rank 0 writing the new weights (full shards or a patch) to the cache", seconds: (m) => m.publish_s },
  { name: "eval and other", note: "held-out evaluation on evaluation steps; metrics, checkpoint.json and run state", seconds: (m) => Math.max(0, m.step_s - m.rollout_s - m.update_s) },
];

/** The per-phase time table: mean, median and max seconds per step, and each phase's share of all step time. */
export function phaseTable(history: StepMetrics[]): string {
  const total = sum(history.map((m) => m.step_s));
  const rows = [...PHASES, { name: "step", note: "the whole step", seconds: (m: StepMetrics) => m.step_s } as Phase].map((p) => {
    const xs = history.map(p.seconds).filter((x): x is number => x !== undefined);
    if (xs.length === 0) return `<tr><th>${p.name}</th><td colspan="4" class="na">not measured</td><td class="note">${esc(p.note)}</td></tr>`;
    const share = total > 0 ? pct(sum(xs) / total) : "–";
    const cells = [mean(xs), median(xs), Math.max(...xs)].map((x) => `<td>${fmtSeconds(x)}</td>`).join("");
    return `<tr class="phase-${p.name.replace(/ /g, "-")}"><th>${p.name}</th>${cells}<td>${p.within ? `(${share})` : share}</td><td class="note">${esc(p.note)}</td></tr>`;
  });
  return `<table class="num"><thead><tr><th>phase</th><th>mean s</th><th>median s</th><th>max s</th><th>share of step time</th><th></th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

/** Weight bytes per step: published by rank 0, fetched by the rollouts (summed over executors). */
export function bytesTable(history: StepMetrics[]): string {
  const row = (name: string, xs: number[]): string => `<tr><th>${name}</th>${[mean(xs), median(xs), Math.max(0, ...xs), sum(xs)].map((x) => `<td>${formatBytes(Math.round(x))}</td>`).join("")}</tr>`;
  const execs = history.map((m) => m.sync_executors);
  return `<table class="num"><thead><tr><th>weights</th><th>mean / step</th><th>median</th><th>max</th><th>total</th></tr></thead><tbody>
${row("published", history.map((m) => m.publish_bytes))}
${row("fetched", history.map((m) => m.sync_bytes))}
</tbody></table>
<p class="note">Published: what rank 0 wrote to the cache, full bf16 shards at a rebase and exact patches otherwise.
Fetched: what the rollout executors brought over before their calls, summed over executors (${mean(execs).toFixed(1)} fetched per step on average).</p>`;
}

/** A row of the checks table: a metric's mean, median, last and max over the steps that report it. */
interface CheckRow {
  name: string;
  get: (m: StepMetrics) => number | undefined;
  fmt: (x: number) => string;
  note: string;
}

const exp = (x: number): string => (x === 0 ? "0" : Math.abs(x) < 0.01 ? x.toExponential(2) : x.toFixed(4));

const CHECKS: CheckRow[] = [
  { name: "KL to the reference", get: (m) => m.kl, fmt: exp, note: "k3 estimator, per generated token" },
  { name: "logprob gap (mean)", get: (m) => m.logprob_gap, fmt: exp, note: "|sampler − trainer| logprob on generated tokens: bf16 rounding when in sync; larger means stale weights or different numerics" },
  { name: "logprob gap (max)", get: (m) => m.logprob_gap_max, fmt: exp, note: "the largest single-token gap of the step" },
  { name: "ratio max", get: (m) => m.ratio_max, fmt: (x) => x.toFixed(3), note: "π/π_old, largest over generated tokens" },
  { name: "clipped tokens", get: (m) => m.clip_frac, fmt: pct, note: "share of generated tokens the PPO clip held" },
  { name: "entropy", get: (m) => m.entropy, fmt: (x) => x.toFixed(3), note: "policy entropy on generated tokens" },
  { name: "policy lag (max)", get: (m) => m.policy_lag_max, fmt: (x) => x.toFixed(0), note: "versions the trained trajectories lag behind the trainers (0 in sync)" },
  { name: "rollout utilisation", get: (m) => m.rollout_util, fmt: pct, note: "rollout executors' busy seconds over step time × executors" },
  { name: "trainer utilisation", get: (m) => m.trainer_util, fmt: pct, note: "trainers' busy seconds over step time × ranks" },
  { name: "zero-variance groups", get: (m) => m.zero_variance_share, fmt: pct, note: "groups whose samples all earned the same reward: dropped, they teach nothing" },
  // Agent runs (the endpoint's counters; "not reported" for environment runs).
  { name: "tool calls unparsed", get: (m) => m.tool_parse_failures, fmt: (x) => x.toFixed(0), note: "replies that looked like a tool call but did not parse: returned to the agent as content" },
  { name: "prefix mismatches", get: (m) => m.prefix_mismatches, fmt: (x) => x.toFixed(0), note: "requests whose rendered prompt did not extend the episode's sampled tokens: a new training sequence" },
  { name: "requests refused", get: (m) => m.refused_requests, fmt: (x) => x.toFixed(0), note: "requests refused for capacity (429)" },
  { name: "sessions without a call", get: (m) => m.sessions_without_calls, fmt: (x) => x.toFixed(0), note: "agent episodes that never called a tool" },
];

/** The agreement checks and utilisation over the run. */
export function checksTable(history: StepMetrics[]): string {
  const rows = CHECKS.map((c) => {
    const xs = history.map(c.get).filter((x): x is number => x !== undefined && Number.isFinite(x));
    const cells = xs.length === 0 ? `<td colspan="4" class="na">not reported</td>` : [mean(xs), median(xs), xs.at(-1)!, Math.max(...xs)].map((x) => `<td>${c.fmt(x)}</td>`).join("");
    return `<tr><th>${c.name}</th>${cells}<td class="note">${esc(c.note)}</td></tr>`;
  });
  return `<table class="num"><thead><tr><th>check</th><th>mean</th><th>median</th><th>last</th><th>max</th><th></th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

/** The options as key–value rows in the order given; functions and unset options are left out. Past 12 rows, two such tables side by side. */
export function optionsTable(options: Record<string, unknown>): string {
  const rows = Object.keys(options)
    .filter((k) => options[k] !== undefined && typeof options[k] !== "function")
    .map((k) => {
      const v = options[k];
      const text = typeof v === "string" ? v : JSON.stringify(v);
      return `<tr><th>${esc(k)}</th><td><code>${esc(text)}</code></td></tr>`;
    });
  const half = rows.length > 12 ? Math.ceil(rows.length / 2) : rows.length;
  const tables = [rows.slice(0, half), rows.slice(half)].filter((r) => r.length > 0);
  return `<div class="figs">${tables.map((r) => `<table class="options"><thead><tr><th>option</th><th>value</th></tr></thead><tbody>${r.join("")}</tbody></table>`).join("")}</div>`;
}

/**
 * The sample worth showing from a step: one that called a tool and earned a
 * reward of 1, else the best rewarded one that called one, else the first.
 */
export function pickSample(samples: readonly ScoredSample[]): ScoredSample | undefined {
  const called = samples.filter((s) => s.calls.length > 0);
  return called.find((s) => s.reward === 1) ?? [...called].sort((a, b) => b.reward - a.reward)[0] ?? samples[0];
}

/** One trajectory, its prompt, generated and inserted (observation) spans coloured apart; `words` names the environment's calls. */
export function trajectorySection(t: { step: number; sample: ScoredSample; decoder: SpanDecoder }, words: EnvWords): string {
  const SPAN_LABEL: Record<SpanKind, string> = {
    prompt: "prompt",
    generated: "generated (trained on)",
    observation: `${words.observation}s (masked out)`,
  };
  const s = t.sample;
  const spans = trajectorySpans(s, t.decoder);
  const c = spanCounts(spans);
  const facts: Array<[string, string]> = [
    ["step", String(t.step)],
    ["question", s.question],
    ["gold answers", s.golds.join(" | ")],
    ["answer", s.answer ?? "(none)"],
    ["reward", String(s.reward)],
    ["advantage", s.advantage.toFixed(3)],
    [words.calls, s.calls.length === 0 ? "none" : s.calls.map((q) => `“${q}”`).join(", ")],
    ["finish", s.finish],
    ["sampled by policy version", String(s.policyVersion)],
  ];
  const chips = (Object.keys(SPAN_LABEL) as SpanKind[]).map((k) => `<span class="chip" style="${SPAN_STYLE[k]}">${SPAN_LABEL[k]}: ${c[k]} tokens</span>`).join(" ");
  const body = spans.map((x) => `<span class="hearth-span hearth-${x.kind}" title="${x.kind} tokens ${x.start}–${x.end}" style="${SPAN_STYLE[x.kind]}">${esc(x.text)}</span>`).join(" ");
  return `<table class="facts"><tbody>${facts.map(([k, v]) => `<tr><th>${k}</th><td>${esc(v)}</td></tr>`).join("")}</tbody></table>
<p>${chips}</p><div class="trajectory">${body}</div>`;
}
