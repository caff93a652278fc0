/**
 * The interactive side of a Search-R1 run, as used from notebooks: a bounded
 * store of recent step results and a training loop with a progress bar that
 * stops between steps (the warm-up's bar is events.ts).
 *
 * `AgentRun` delegates to these; they hold no executors themselves.
 */
import { HearthError } from "../../errors/index.js";
import { inNotebook } from "../../notebook/display.js";
import { progress, type ProgressBar } from "../../notebook/progress.js";
import { callsOf, type ScoredSample, type StepMetrics, type StepResult } from "../types.js";

/** Step results kept for inspection by default (`--keep-steps`; trajectories hold every token, so the store is bounded). */
export const KEPT_STEPS = 50;

/**
 * The last `limit` step results, by step number: the inspection window. A
 * result that leaves it is handed back by `add`, for its owner to delete its
 * objects.
 */
export class StepStore {
  private readonly byStep = new Map<number, StepResult>();

  constructor(readonly limit = KEPT_STEPS) {
    if (!Number.isInteger(limit) || limit < 1) throw new HearthError(`StepStore needs a limit ≥ 1; got ${String(limit)}`);
  }

  /** Stores a result; returns the oldest ones it dropped past the limit (they left the window). */
  add(result: StepResult): StepResult[] {
    this.byStep.set(result.metrics.step, result);
    const dropped: StepResult[] = [];
    while (this.byStep.size > this.limit) {
      const [step, old] = this.byStep.entries().next().value!;
      this.byStep.delete(step);
      dropped.push(old);
    }
    return dropped;
  }

  /** Empties the store; returns what it held. */
  clear(): StepResult[] {
    const all = [...this.byStep.values()];
    this.byStep.clear();
    return all;
  }

  /** Step numbers held, oldest first. */
  steps(): number[] {
    return [...this.byStep.keys()];
  }

  /** The result of `step` (default: the latest); a clear error when it is not held. */
  get(step?: number): StepResult {
    const held = this.steps();
    if (held.length === 0) throw new HearthError("no step has run yet on this run; call run.step() or run.train(n) first");
    const want = step ?? held[held.length - 1]!;
    const r = this.byStep.get(want);
    if (!r) {
      const window = `this run keeps the last ${this.limit} step results (--keep-steps ${this.limit}; held: steps ${held[0]}–${held[held.length - 1]})`;
      const why =
        typeof want === "number" && want < held[0]!
          ? `it left the inspection window, and its samples and trajectory objects were deleted then; start the run with a larger --keep-steps (keepSteps) to look further back`
          : "no such step has run";
      throw new HearthError(`step ${String(want)} is not held: ${window}; ${why}`);
    }
    return r;
  }

  /** Replaces a held result's samples (after a rescore). */
  replaceSamples(step: number, samples: ScoredSample[]): void {
    this.get(step).samples = samples;
  }
}

/**
 * Splits a step's samples back into their prompt groups: consecutive samples
 * of one prompt (same item id and group index), at most `groupSize` each.
 */
export function regroup(samples: readonly ScoredSample[], groupSize?: number): ScoredSample[][] {
  const groups: ScoredSample[][] = [];
  for (const s of samples) {
    const last = groups[groups.length - 1];
    const head = last?.[0];
    if (last && head && head.itemId === s.itemId && head.group === s.group && head.question === s.question && (groupSize === undefined || last.length < groupSize)) last.push(s);
    else groups.push([s]);
  }
  return groups;
}

/** Options of `run.train(n)`. */
export interface TrainOptions {
  /** Stops between steps when aborted; the run stays consistent. */
  signal?: AbortSignal;
  /** Called after every step. */
  onStep?: (r: StepResult) => void;
  /** Show a progress bar (in place in notebooks, a terminal line elsewhere). Default true. */
  progress?: boolean;
  /** The bar's label. Default "train". */
  label?: string;
}

/**
 * Runs `n` steps one after another. Stops between steps when `signal` aborts
 * or, in a notebook, when the kernel is interrupted (the step in flight
 * finishes, so the run stays consistent; the interrupted cell ends at once).
 * A failing step ends the loop with its error; the run is usable afterwards.
 */
export async function trainLoop(n: number, step: () => Promise<StepResult>, opts: TrainOptions = {}): Promise<StepMetrics[]> {
  if (!Number.isInteger(n) || n < 0) throw new HearthError(`train(n) needs a whole number of steps ≥ 0; got ${String(n)}`);
  const bar: ProgressBar | null = opts.progress === false ? null : progress(n, { label: opts.label ?? "train" });
  let interrupted = false;
  const onSigint = (): void => {
    interrupted = true;
  };
  const watch = inNotebook();
  if (watch) process.on("SIGINT", onSigint);
  const out: StepMetrics[] = [];
  let failure: unknown;
  try {
    for (let i = 0; i < n && !opts.signal?.aborted && !interrupted; i++) {
      const r = await step();
      out.push(r.metrics);
      opts.onStep?.(r);
      const m = r.metrics;
      const c = callsOf(m);
      bar?.tick(1, `step ${m.step}: reward ${m.reward_mean.toFixed(2)}, em ${m.em.toFixed(2)}, ${c.word} ${c.perSample.toFixed(2)}`);
    }
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    if (watch) process.off("SIGINT", onSigint);
    if (bar && out.length < n) {
      const why = failure ? `failed: ${(failure as Error).message ?? String(failure)}` : interrupted ? "interrupted" : "aborted";
      bar.finish(`stopped after ${out.length} step(s) (${why})`);
    }
  }
  return out;
}
