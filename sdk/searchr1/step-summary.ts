/**
 * The summary a step result displays as, in notebooks and as text: plain
 * HTML and text tables, so the CLI's training path needs no table library.
 */
import { JUPYTER_DISPLAY, type MimeBundle } from "../notebook/display.js";
import { htmlTable, textTable } from "../notebook/text.js";
import type { ScoredSample } from "./batch.js";

/** A titled key/value table; the display of a step or a rescore. */
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

/** The summary of a step's metrics (what `StepResult` displays as). */
export function stepSummary(metrics: object, samples: readonly ScoredSample[]): SummaryView {
  const m = metrics as Record<string, unknown>;
  const entries = Object.entries(m).filter(([, v]) => typeof v === "number");
  const step = typeof m.step === "number" ? `step ${m.step}` : "step";
  return new SummaryView(`${step}: ${samples.length} samples, ${samples.filter((s) => s.kept).length} trained on`, entries);
}

/** Attaches a (non-enumerable) display method to a step result, so it renders as its summary. */
export function withStepDisplay<T extends { metrics: object; samples: ScoredSample[] }>(result: T): T {
  Object.defineProperty(result, JUPYTER_DISPLAY, { value: () => stepSummary(result.metrics, result.samples)[JUPYTER_DISPLAY](), enumerable: false, configurable: true });
  return result;
}

