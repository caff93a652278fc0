/**
 * Typed progress of a run. A run (AgentRun) emits these through the `onEvent`
 * option as it works (the task, its executors, the warm start step by step,
 * each publication, each step's weight sync, each training step and each
 * evaluation), so a progress display reads facts, not log lines. Two
 * renderers: `warmupProgress()` for notebooks (a bar that updates in place)
 * and `terminalProgress()` for the CLI (a bar on a TTY, plain lines otherwise).
 */
import { progress, type ProgressBar } from "../../notebook/progress.js";
import { inNotebook } from "../../notebook/display.js";
import type { StepMetrics } from "../types.js";

/** One thing a run did. */
export type RunEvent =
  | { type: "task"; describe: string; train: number; heldOut: number }
  | { type: "executors"; rollouts: number; trainers: number; reattached: boolean }
  | { type: "warmstart"; step: number; total: number; nll?: number; cached?: boolean }
  | { type: "published"; version: number; bytes: number; kind: string; params?: number }
  | { type: "sync"; step: number; bytes: number; executors: number; version: number }
  | { type: "step"; step: number; metrics: StepMetrics }
  | { type: "eval"; step: number; em: number; callsPerSample: number; /** The environment's word for its calls ("searches"). */ calls: string }
  | { type: "warning"; step: number; text: string };

/** Receives events. */
export type RunEventHandler = (e: RunEvent) => void;

const PHASES = ["task prepared", "executors warm", "warm start done", "weights published"] as const;

/**
 * A notebook bar over a run's `create` phases, advanced by its events
 * (the warm start shows its own step count). Pass `onEvent` to create; `log`
 * passes lines on to `next` (default: in notebooks only the `note:` lines are
 * printed, such as which starting policy the trainers load; elsewhere every
 * line).
 */
export function warmupProgress(opts: { label?: string; next?: (line: string) => void } = {}): { log: (line: string) => void; onEvent: RunEventHandler; bar: ProgressBar } {
  const bar = progress(PHASES.length, { label: opts.label ?? "warm-up", intervalMs: 0 });
  const next = opts.next ?? (inNotebook() ? (line: string) => void (line.startsWith("note: ") && console.log(line)) : (line: string) => console.log(line));
  const onEvent: RunEventHandler = (e) => {
    if (e.type === "task") bar.update(1, PHASES[0]);
    else if (e.type === "executors") bar.update(e.reattached ? 4 : 2, e.reattached ? "reattached to the warm run" : PHASES[1]);
    else if (e.type === "warmstart") bar.update(e.cached || e.step >= e.total ? 3 : 2, e.cached ? "warm start cached" : `warm start ${e.step}/${e.total}${e.nll !== undefined ? `, token NLL ${e.nll.toFixed(3)}` : ""}`);
    else if (e.type === "published") bar.update(4, `${PHASES[3]} (${e.bytes.toLocaleString()} bytes)`);
  };
  return { log: next, onEvent, bar };
}

/**
 * The CLI's progress: on a TTY the warm start is a bar that redraws in place;
 * otherwise plain lines, one per tenth of the warm start. Other events are
 * printed as lines by the CLI itself.
 */
export function terminalProgress(stream: NodeJS.WriteStream = process.stdout): RunEventHandler {
  let bar: ProgressBar | undefined;
  let lastLine = 0;
  return (e) => {
    if (e.type !== "warmstart" || e.cached) return;
    if (stream.isTTY) {
      bar ??= progress(e.total, { label: "warm start", stream });
      bar.update(e.step, e.nll !== undefined ? `token NLL ${e.nll.toFixed(3)}` : undefined);
      return;
    }
    const tenth = Math.floor((e.step * 10) / e.total);
    if (tenth > lastLine || e.step === e.total) {
      lastLine = tenth;
      stream.write(`warm start ${e.step}/${e.total}${e.nll !== undefined ? `: token NLL ${e.nll.toFixed(3)}` : ""}\n`);
    }
  };
}

/** The warm start as a run's events timed it. */
export interface WarmStartTime {
  seconds: number;
  /** Supervised steps taken (the recipe's count when cached). */
  steps: number;
  /** Loaded from the cache in HEARTH_HOME, not made. */
  cached: boolean;
}

/**
 * Times the warm start from a run's events, passing each on to `next`: from
 * the executors being ready to the last warm-start step. `warmStart()` is
 * undefined when the run had none (a model folder, a resume, a reattach).
 */
export function warmStartClock(next?: RunEventHandler): { onEvent: RunEventHandler; warmStart: () => WarmStartTime | undefined } {
  let from: number | undefined;
  let last: WarmStartTime | undefined;
  const onEvent: RunEventHandler = (e) => {
    if (e.type === "executors") from = performance.now();
    else if (e.type === "warmstart") last = { seconds: (performance.now() - (from ?? performance.now())) / 1000, steps: e.step, cached: e.cached === true };
    next?.(e);
  };
  return { onEvent, warmStart: () => last };
}
