/**
 * What a step result displays as, in notebooks and as text: a compact card
 * that reads at a glance (reward, EM, tool calls, kept groups, the step's time
 * by phase, the weight bytes synced, KL and the sampler/trainer logprob gap,
 * held-out EM on evaluation steps) with every metric one click away (an HTML
 * `<details>` holding the full table) or one call away (`result.metrics`, or
 * `metricsView(result.metrics)` as a table). Plain HTML and text, so the CLI's
 * training path needs no table library.
 */
import { JUPYTER_DISPLAY, type MimeBundle } from "../../notebook/display.js";
import { escapeHtml, htmlTable, textTable } from "../../notebook/text.js";
import { formatBytes } from "../../format.js";
import { callsOf, type ScoredSample } from "../types.js";

/** A titled key/value table: every metric of a step (`metricsView`), or a rescore's summary. */
export class SummaryView {
  constructor(
    readonly title: string,
    readonly entries: ReadonlyArray<readonly [string, unknown]>,
  ) {}

  [JUPYTER_DISPLAY](): MimeBundle {
    const rows = this.entries.map(([k, v]) => [k, v] as unknown[]);
    return { "text/plain": `${this.title}\n${textTable(["", "value"], rows)}`, "text/html": `<div class="hearth-summary">${htmlTable(["", "value"], rows, this.title)}</div>` };
  }
}

/** Every numeric metric of a step as a key/value table, in metrics.jsonl order (what the card's "all metrics" holds). */
export function metricsView(metrics: object, title?: string): SummaryView {
  const m = metrics as Record<string, unknown>;
  return new SummaryView(title ?? `step ${String(m.step ?? "?")}: all metrics`, Object.entries(m).filter(([, v]) => typeof v === "number"));
}

/** The phases a step's time splits into (as the report's phase table: update without its publication; eval and other the rest). */
export interface StepPhases {
  rollout: number;
  /** The longest rollout call's weight fetch: part of rollout. */
  sync?: number;
  update: number;
  publish?: number;
  other: number;
  step: number;
}

/** Splits a step's seconds by phase. */
export function stepPhases(m: Record<string, unknown>): StepPhases {
  const n = (k: string): number | undefined => (typeof m[k] === "number" && Number.isFinite(m[k]) ? (m[k] as number) : undefined);
  const step = n("step_s") ?? 0;
  const rollout = n("rollout_s") ?? 0;
  const publish = n("publish_s");
  const update = Math.max(0, (n("update_s") ?? 0) - (publish ?? 0));
  return { rollout, sync: n("sync_s"), update, publish, other: Math.max(0, step - rollout - update - (publish ?? 0)), step };
}

const PHASE_COLOR = { rollout: "#1c7ed6", update: "#d9480f", publish: "#2b8a3e", other: "#adb5bd" } as const;

const secs = (s: number): string => (s >= 10 ? s.toFixed(1) : s >= 1 ? s.toFixed(2) : s.toFixed(3));
const pct = (v: number): string => `${(v * 100).toFixed(1)}%`;
const small = (v: number): string => (v !== 0 && Math.abs(v) < 0.01 ? v.toExponential(1) : v.toFixed(4));

/** The card's facts, as label/value pairs (the same for HTML and text). */
function facts(m: Record<string, unknown>): { headline: Array<[string, string]>; phases: StepPhases; sync: string; checks: string; evaluation?: string; agent?: string } {
  const num = (k: string): number | undefined => (typeof m[k] === "number" ? (m[k] as number) : undefined);
  const calls = callsOf(m);
  const kept = num("groups_kept") ?? 0;
  const groups = kept + (num("groups_dropped") ?? 0);
  const headline: Array<[string, string]> = [
    ["reward", (num("reward_mean") ?? NaN).toFixed(3)],
    ["EM", pct(num("em") ?? NaN)],
    [`${calls.word} / sample`, calls.perSample.toFixed(2)],
    ["groups kept", `${kept} / ${groups}`],
  ];
  const syncBytes = num("sync_bytes");
  const sync = syncBytes === undefined ? "sync: not measured" : `sync ${formatBytes(syncBytes)} to ${num("sync_executors") ?? 0} rollout(s) (published ${formatBytes(num("publish_bytes") ?? 0)}, weights v${num("weights_version") ?? "?"})`;
  const kl = num("kl");
  const gap = num("logprob_gap");
  const checks = kl === undefined && gap === undefined
    ? "KL and logprob gap: no sample was trained on"
    : `KL ${kl !== undefined ? small(kl) : "–"} · logprob gap ${gap !== undefined ? small(gap) : "–"} (max ${num("logprob_gap_max") !== undefined ? small(num("logprob_gap_max")!) : "–"})${num("policy_lag_max") ? ` · policy lag ≤ ${num("policy_lag_max")}` : ""}`;
  const evalEm = num("eval_em");
  const by = m.eval_em_by as Record<string, number> | undefined;
  const evaluation = evalEm === undefined ? undefined : `held-out EM ${pct(evalEm)}${by ? ` (${Object.entries(by).map(([c, v]) => `${c} ${pct(v)}`).join(" · ")})` : ""}, ${calls.word} ${(calls.eval ?? 0).toFixed(2)}`;
  return { headline, phases: stepPhases(m), sync, checks, evaluation, agent: agentLine(num) };
}

/** An agent run's endpoint counters as one line (undefined for environment runs): the silent failures, counted. */
function agentLine(num: (k: string) => number | undefined): string | undefined {
  const sessions = num("agent_sessions");
  if (sessions === undefined) return undefined;
  const zv = num("zero_variance_share");
  return `agent: ${sessions} sessions, ${num("agent_requests") ?? 0} requests · tool calls ${num("agent_tool_calls") ?? 0}, unparsed ${num("tool_parse_failures") ?? 0} · prefix mismatches ${num("prefix_mismatches") ?? 0} · refused ${num("refused_requests") ?? 0} · sessions without a call ${num("sessions_without_calls") ?? 0} · zero-variance groups ${zv !== undefined ? pct(zv) : "–"}${num("agent_failures") ? ` · failed ${num("agent_failures")}` : ""}`;
}

/** The phases as one line of text: "3.20 s: rollout 1.50 (sync 0.020) · update 0.750 · publish 0.050 · other 0.900". */
function phaseText(p: StepPhases): string {
  const parts = [`rollout ${secs(p.rollout)}${p.sync !== undefined ? ` (sync ${secs(p.sync)})` : ""}`, `update ${secs(p.update)}`, ...(p.publish !== undefined ? [`publish ${secs(p.publish)}`] : []), `other ${secs(p.other)}`];
  return `${secs(p.step)} s: ${parts.join(" · ")}`;
}

/** The phases as a bar: one coloured segment per phase, widths by share of the step (each segment carries its phase and seconds). */
function phaseBar(p: StepPhases): string {
  const total = p.rollout + p.update + (p.publish ?? 0) + p.other;
  const seg = (phase: keyof typeof PHASE_COLOR, s: number): string =>
    s <= 0 || total <= 0 ? "" : `<span class="hearth-phase" data-phase="${phase}" data-seconds="${s}" title="${phase} ${secs(s)} s" style="display:inline-block;height:100%;width:${((100 * s) / total).toFixed(2)}%;background:${PHASE_COLOR[phase]}"></span>`;
  return `<div class="hearth-phase-bar" style="display:flex;height:10px;width:100%;max-width:420px;border-radius:3px;overflow:hidden;background:#f1f3f5;margin:4px 0 2px">${seg("rollout", p.rollout)}${seg("update", p.update)}${seg("publish", p.publish ?? 0)}${seg("other", p.other)}</div>`;
}

/** The compact card of a step (what `StepResult` displays as). */
export class StepCard {
  constructor(
    readonly metrics: Readonly<Record<string, unknown>>,
    readonly samples: readonly ScoredSample[],
  ) {}

  /** "step 4: 8 samples, 4 trained on". */
  get title(): string {
    const step = typeof this.metrics.step === "number" ? `step ${this.metrics.step}` : "step";
    return `${step}: ${this.samples.length} samples, ${this.samples.filter((s) => s.kept).length} trained on`;
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const f = facts(this.metrics);
    const all = metricsView(this.metrics);
    const text = [
      this.title,
      f.headline.map(([k, v]) => `${k} ${v}`).join("  ·  "),
      `time ${phaseText(f.phases)}`,
      f.sync,
      f.checks,
      ...(f.agent ? [f.agent] : []),
      ...(f.evaluation ? [f.evaluation] : []),
      `(all ${all.entries.length} metrics: result.metrics, or metricsView(result.metrics))`,
    ].join("\n");
    const tile = ([k, v]: [string, string]): string =>
      `<div class="hearth-card-tile" data-key="${escapeHtml(k)}" style="min-width:92px"><div style="font-size:11px;color:#666">${escapeHtml(k)}</div><div class="hearth-card-value" style="font-size:18px;font-weight:600;font-variant-numeric:tabular-nums">${escapeHtml(v)}</div></div>`;
    const line = (cls: string, t: string): string => `<div class="${cls}" style="font-size:12.5px;color:#333">${escapeHtml(t)}</div>`;
    const html =
      `<div class="hearth-step-card" style="font-family:system-ui,sans-serif;border:1px solid #dee2e6;border-radius:6px;padding:8px 12px;max-width:560px">` +
      `<div class="hearth-card-title" style="font-weight:600;margin-bottom:4px">${escapeHtml(this.title)}</div>` +
      `<div style="display:flex;gap:14px;flex-wrap:wrap">${f.headline.map(tile).join("")}</div>` +
      phaseBar(f.phases) +
      line("hearth-card-time", `time ${phaseText(f.phases)}`) +
      line("hearth-card-sync", f.sync) +
      line("hearth-card-checks", f.checks) +
      (f.agent ? line("hearth-card-agent", f.agent) : "") +
      (f.evaluation ? line("hearth-card-eval", f.evaluation) : "") +
      `<details class="hearth-all-metrics" style="margin-top:4px"><summary style="cursor:pointer;font-size:12px;color:#1c7ed6">all ${all.entries.length} metrics</summary>${all[JUPYTER_DISPLAY]()["text/html"] as string}</details>` +
      `</div>`;
    return { "text/plain": text, "text/html": html };
  }
}

/** The card of a step's metrics and samples (what `StepResult` displays as). */
export function stepSummary(metrics: object, samples: readonly ScoredSample[]): StepCard {
  return new StepCard(metrics as Record<string, unknown>, samples);
}

/** Attaches a (non-enumerable) display method to a step result, so it renders as its card. */
export function withStepDisplay<T extends { metrics: object; samples: ScoredSample[] }>(result: T): T {
  Object.defineProperty(result, JUPYTER_DISPLAY, { value: () => stepSummary(result.metrics, result.samples)[JUPYTER_DISPLAY](), enumerable: false, configurable: true });
  return result;
}
