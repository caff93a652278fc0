/**
 * Notebook views of a run's steps, built from scored samples only (no run,
 * no executors), so they are cheap to test: the trajectory table, one
 * trajectory split into prompt / generated / observation spans (the loss mask
 * made visible) and a rescore's summary (a step's summary is step-summary.ts). Each renders as
 * HTML in the hearth kernel and as text anywhere else.
 */
import { JUPYTER_DISPLAY, escapeHtml, table, type DataTable, type MimeBundle } from "../../notebook/index.js";
import { HearthError } from "../../errors/index.js";
import { scoreSamples } from "../scoring/batch.js";
import { regroup } from "../run/interactive.js";
import type { EnvWords, RewardFn, ScoredSample } from "../types.js";
import { SummaryView } from "../report/step-summary.js";
import { SPAN_STYLE, spanCounts, trajectorySpans, type Span, type SpanDecoder, type SpanKind } from "./spans.js";
import { conversationHtml, conversationText } from "./conversation.js";

export { trajectorySpans, type Span, type SpanDecoder, type SpanKind } from "./spans.js";

/** One row of the trajectory table. */
export interface TrajectoryRow {
  i: number;
  question: string;
  golds: string;
  response: string;
  /** Tool calls the sample made. */
  calls: number;
  answer: string;
  reward: number;
  advantage: number;
  kept: boolean;
  /** All tokens: prompt, generated and inserted observations. */
  tokens: number;
  /** Tokens the loss ignores (mask 0: the prompt and inserted observations). */
  masked: number;
}

/** The rows of the trajectory table, in sample order (`i` is the index `run.trajectory(i)` takes). */
export function trajectoryRows(samples: readonly ScoredSample[]): TrajectoryRow[] {
  return samples.map((s, i) => ({
    i,
    question: s.question,
    golds: s.golds.join(" | "),
    response: s.response,
    calls: s.calls.length,
    answer: s.answer ?? "",
    reward: s.reward,
    advantage: s.advantage,
    kept: s.kept,
    tokens: s.tokens.length,
    masked: s.tokens.length - countOnes(s.mask),
  }));
}

/**
 * The trajectory table of a step: arquero HTML in notebooks, aligned text
 * elsewhere. Responses are cut to `responseChars` (default 100) so the table
 * stays readable; `TrajectoryView` shows one trajectory whole. The calls
 * column is named in the environment's `words` ("searches"; default "calls").
 */
export function trajectoryTable(samples: readonly ScoredSample[], opts: { step?: number; limit?: number; responseChars?: number; words?: EnvWords } = {}): DataTable {
  const title = `${opts.step !== undefined ? `step ${opts.step}: ` : ""}${samples.length} trajectories`;
  const cut = opts.responseChars ?? 100;
  const calls = opts.words?.calls ?? "calls";
  // The columns in TrajectoryRow's order, the calls column under the environment's name.
  const rows = trajectoryRows(samples).map((r) => ({
    i: r.i,
    question: r.question,
    golds: r.golds,
    response: r.response.length > cut ? `${r.response.slice(0, cut - 1)}…` : r.response,
    [calls]: r.calls,
    answer: r.answer,
    reward: r.reward,
    advantage: r.advantage,
    kept: r.kept,
    tokens: r.tokens,
    masked: r.masked,
  }));
  return table(rows, { title, limit: opts.limit ?? 64 });
}

/** One trajectory with its spans told apart: what the loss trains on is green. */
export class TrajectoryView {
  readonly spans: Span[];

  constructor(
    readonly sample: ScoredSample,
    tokenizer: SpanDecoder,
    readonly index: number,
    readonly step?: number,
    /** The environment's words ("2 searches", "retrieved passages"); default generic ones. */
    readonly words: EnvWords = { call: "tool call", calls: "tool calls", observation: "observation" },
  ) {
    this.spans = trajectorySpans(sample, tokenizer);
  }

  /** Tokens per span kind. */
  counts(): Record<SpanKind, number> {
    return spanCounts(this.spans);
  }

  private header(): string {
    const s = this.sample;
    const where = `trajectory ${this.index}${this.step !== undefined ? ` of step ${this.step}` : ""}`;
    const seq = s.episode && s.episode.sequences > 1 ? `, sequence ${s.episode.sequence + 1} of ${s.episode.sequences} of its episode` : "";
    return `${where}: reward ${fmt(s.reward)}, advantage ${fmt(s.advantage)}${s.kept ? "" : " (group dropped)"}, answer ${JSON.stringify(s.answer)}, golds ${JSON.stringify(s.golds)}, ${s.calls.length} ${s.calls.length === 1 ? this.words.call : this.words.calls}, finish ${s.finish}${s.error ? ` (${s.error})` : ""}${seq}`;
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const c = this.counts();
    const legend = `prompt ${c.prompt} tokens · generated (trained) ${c.generated} · ${this.words.observation}s (masked) ${c.observation}`;
    const text = [this.header(), legend, ...this.spans.map((s) => `[${s.kind} ${s.start}-${s.end}] ${s.text}`)].join("\n");
    const chips = (Object.keys(SPAN_STYLE) as SpanKind[]).map((k) => `<span style="${SPAN_STYLE[k]}; padding: 0 4px">${k} (${c[k]})</span>`).join(" ");
    const body = this.spans
      .map((s) => `<span class="hearth-span hearth-${s.kind}" title="${s.kind} tokens ${s.start}-${s.end}" style="${SPAN_STYLE[s.kind]}">${escapeHtml(s.text)}</span>`)
      .join(" ");
    // An agent episode: its conversation as the agent saw it, above the tokens the loss sees.
    const messages = this.sample.messages;
    const convo = messages && messages.length > 0 ? `<p><b>the conversation</b> (the agent's messages; only sampled replies train)</p>${conversationHtml(messages)}<p><b>the tokens</b></p>` : "";
    const html =
      `<div class="hearth-trajectory"><p><b>${escapeHtml(this.header())}</b></p>${convo}<p>${chips}</p>` +
      `<div style="font-family: monospace; white-space: pre-wrap; line-height: 1.6">${body}</div></div>`;
    return { "text/plain": messages && messages.length > 0 ? `${text}\n${conversationText(messages)}` : text, "text/html": html };
  }
}

/** What a rescore changed. */
export class RescoreView extends SummaryView {
  constructor(
    readonly step: number,
    readonly before: readonly ScoredSample[],
    readonly after: readonly ScoredSample[],
    groups: { kept: number; dropped: number },
  ) {
    const changed = after.filter((s, i) => s.reward !== before[i]!.reward).length;
    super(`rescored step ${step}: ${changed} of ${after.length} rewards changed`, [
      ["reward mean before", mean(before.map((s) => s.reward))],
      ["reward mean after", mean(after.map((s) => s.reward))],
      ["rewards changed", changed],
      ["groups kept", groups.kept],
      ["groups dropped", groups.dropped],
      ["advantage |mean| after", Math.abs(mean(after.map((s) => s.advantage)))],
    ]);
  }

  /** Number of samples whose reward changed. */
  get changed(): number {
    return this.after.filter((s, i) => s.reward !== this.before[i]!.reward).length;
  }
}

function countOnes(mask: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) if (mask[i]) n++;
  return n;
}

function mean(xs: number[]): number {
  return xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length;
}

function fmt(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(3);
}

/**
 * Recomputes rewards and group advantages of stored samples with `reward`.
 * A reward that throws or returns a non-finite number throws (scoreSamples'
 * RewardError naming the sample) before anything changes.
 */
export function rescoreSamples(step: number, samples: readonly ScoredSample[], reward: RewardFn, groupSize?: number): RescoreView {
  if (typeof reward !== "function") throw new HearthError("rescore needs a reward function (response, golds) => number");
  const groups = regroup(samples, groupSize).map((g) => ({ question: g[0]!.question, golds: g[0]!.golds, samples: g }));
  const scored = scoreSamples(groups, reward);
  return new RescoreView(step, samples, scored.samples, { kept: scored.groupsKept, dropped: scored.groupsDropped });
}
