/**
 * Plots of a Search-R1 run as plotly figures (sdk/notebook's Figure): the
 * training curves from `run.history`, and per-step histograms of advantages
 * and lengths. They render in notebooks, in exported HTML and as text.
 *
 * ```ts
 * plot.curve(run.history, "em");        // EM per step (and held-out EM where evaluated)
 * plot.advantages(run.result());        // advantages of the last step, by kept/dropped
 * plot.lengths(run.result(3));          // generated vs masked tokens per sample
 * ```
 */
import { HearthError } from "../../errors/index.js";
import { figure, type Figure, type Trace } from "../../notebook/index.js";
import type { ScoredSample } from "../scoring/batch.js";
import { callsWord, type StepMetrics } from "../types.js";

/**
 * The curves `plot.curve` draws: "em", "reward", "calls" (the environment's
 * tool calls per sample; its own word works too: "searches"), or any numeric
 * field of the metrics ("kl", "step_s").
 */
export type CurveMetric = "em" | "reward" | "calls" | (string & {});

interface Curve {
  field: string;
  eval?: string;
  title: string;
}

const CURVES: Record<string, Curve> = {
  em: { field: "em", eval: "eval_em", title: "exact match" },
  reward: { field: "reward_mean", title: "mean reward" },
};

function curveOf(history: readonly StepMetrics[], metric: string): Curve {
  const known = CURVES[metric];
  if (known) return known;
  const word = history.length > 0 ? callsWord(history[0]!) : "calls";
  if (metric === "calls" || metric === word) return { field: `${word}_per_sample`, eval: `eval_${word}`, title: `${word} per sample` };
  if (history.some((m) => typeof m[metric] === "number")) return { field: metric, title: metric };
  throw new HearthError(`plot.curve: unknown metric ${JSON.stringify(metric)}; use em, reward, calls (${word}), or a numeric field of the metrics`);
}

/** Samples of a step: a step result or the samples themselves. */
export type StepSamples = { samples: readonly ScoredSample[]; metrics?: { step: number } } | readonly ScoredSample[];

function samplesOf(s: StepSamples): { samples: readonly ScoredSample[]; label: string } {
  if (Array.isArray(s)) return { samples: s as readonly ScoredSample[], label: "" };
  const r = s as { samples: readonly ScoredSample[]; metrics?: { step: number } };
  return { samples: r.samples, label: r.metrics ? `step ${r.metrics.step}: ` : "" };
}

/** A training curve over steps; for em and calls, held-out values join as a second trace where evaluated. */
function curve(history: readonly StepMetrics[], metric: CurveMetric): Figure {
  const c = curveOf(history, metric);
  const traces: Trace[] = [{ type: "scatter", mode: "lines+markers", name: `train ${metric}`, x: history.map((m) => m.step), y: history.map((m) => m[c.field] as number) }];
  const ev = c.eval ? history.filter((m) => typeof m[c.eval!] === "number") : [];
  if (ev.length > 0) traces.push({ type: "scatter", mode: "lines+markers", name: `held-out ${metric}`, x: ev.map((m) => m.step), y: ev.map((m) => m[c.eval!] as number) });
  return figure(traces, { layout: { title: { text: c.title }, xaxis: { title: { text: "step" } }, yaxis: { title: { text: c.title } } } });
}

/** Histogram of a step's advantages: trained-on samples, and the zeros of dropped groups apart. */
function advantages(step: StepSamples): Figure {
  const { samples, label } = samplesOf(step);
  const kept = samples.filter((s) => s.kept).map((s) => s.advantage);
  const dropped = samples.filter((s) => !s.kept).map((s) => s.advantage);
  return figure(
    [
      { type: "histogram", name: "kept groups", x: kept, nbinsx: 20 },
      { type: "histogram", name: "dropped groups (all rewards equal)", x: dropped, nbinsx: 20 },
    ],
    { layout: { title: { text: `${label}advantages` }, barmode: "stack", xaxis: { title: { text: "advantage" } }, yaxis: { title: { text: "samples" } } } },
  );
}

/** Histogram of a step's lengths: generated (trained) tokens and masked (prompt + retrieved) tokens per sample. */
function lengths(step: StepSamples): Figure {
  const { samples, label } = samplesOf(step);
  const generated = samples.map((s) => ones(s.mask));
  const masked = samples.map((s, i) => s.tokens.length - generated[i]!);
  return figure(
    [
      { type: "histogram", name: "generated tokens", x: generated, opacity: 0.7 },
      { type: "histogram", name: "masked tokens (prompt + retrieved)", x: masked, opacity: 0.7 },
    ],
    { layout: { title: { text: `${label}lengths` }, barmode: "overlay", xaxis: { title: { text: "tokens per sample" } }, yaxis: { title: { text: "samples" } } } },
  );
}

function ones(mask: ArrayLike<number>): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) if (mask[i]) n++;
  return n;
}

/** Plots of a run: `plot.curve(run.history, "em")`, `plot.advantages(step)`, `plot.lengths(step)`. */
export const plot = { curve, advantages, lengths } as const;
