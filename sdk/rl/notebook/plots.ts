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
import type { StepMetrics } from "../run/run.js";

/** The curves `plot.curve` draws. */
export type CurveMetric = "em" | "reward" | "searches";

const CURVES: Record<CurveMetric, { field: keyof StepMetrics; eval?: keyof StepMetrics; title: string }> = {
  em: { field: "em", eval: "eval_em", title: "exact match" },
  reward: { field: "reward_mean", title: "mean reward" },
  searches: { field: "searches_per_sample", eval: "eval_searches", title: "searches per sample" },
};

/** Samples of a step: a step result or the samples themselves. */
export type StepSamples = { samples: readonly ScoredSample[]; metrics?: { step: number } } | readonly ScoredSample[];

function samplesOf(s: StepSamples): { samples: readonly ScoredSample[]; label: string } {
  if (Array.isArray(s)) return { samples: s as readonly ScoredSample[], label: "" };
  const r = s as { samples: readonly ScoredSample[]; metrics?: { step: number } };
  return { samples: r.samples, label: r.metrics ? `step ${r.metrics.step}: ` : "" };
}

/** A training curve over steps; for em and searches, held-out values join as a second trace where evaluated. */
function curve(history: readonly StepMetrics[], metric: CurveMetric): Figure {
  const c = CURVES[metric];
  if (!c) throw new HearthError(`plot.curve: unknown metric ${JSON.stringify(metric)}; use one of ${Object.keys(CURVES).join(", ")}`);
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
