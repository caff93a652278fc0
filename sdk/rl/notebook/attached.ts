/**
 * A run that lives on the cluster, seen from a notebook (or any program):
 * `await AgentRun.attach(name)` opens the run's app as one of its drivers
 * and gives a live handle on the loop that runs it (loop-service.ts). The
 * handle holds nothing the run needs: detach, lose the kernel, or attach
 * again from another machine, and the run goes on.
 *
 * @example
 * ```ts
 * const run = await AgentRun.attach("nightly");
 * await run.follow();                       // a progress bar that follows the run (interrupt: stop following)
 * run.history.at(-1);                       // every step's metrics so far
 * await run.trajectories();                 // the latest step's trajectories, as a table
 * await run.pause(); await run.step();      // exactly one step while paused
 * await run.setReward({ module: "/home/me/reward.mjs", export: "partialCredit" });
 * await run.resume();
 * await run.stop();                         // after its step: metrics, checkpoint and report; services released
 * ```
 */
import { HearthError } from "../../errors/index.js";
import { inNotebook } from "../../notebook/display.js";
import { progress, type ProgressBar } from "../../notebook/progress.js";
import type { DataTable } from "../../notebook/table.js";
import { connect } from "../../connect.js";
import type { App } from "../../runtime/app.js";
import type { PoolHandle } from "../../runtime/handles.js";
import { stepRow } from "../report/report.js";
import { followRun, loopOf, STOP_WAIT_MS, type RunClientOptions } from "../cluster/detached.js";

/** How long `stop()` waits, by default, for the run to write its outputs and end (the same as `hearth stop`). */
export { STOP_WAIT_MS };
import type { RunLoopService } from "../cluster/loop-service.js";
import type { ServiceSource } from "../run/options.js";
import { LOG_KEEP, LoopLogReader, readLoopStatus, type LoopEvent, type LoopStatus } from "../state/run-log.js";
import { readRunState } from "../state/run-state.js";
import type { EnvWords, RewardFn, ScoredSample, StepMetrics } from "../types.js";
import { rescoreSamples, trajectoryTable, type RescoreView } from "./views.js";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { ReplayOptions } from "../replay/replay.js";
import type { ReplayJSON } from "../replay/episode.js";
import { EpisodeReplay } from "../replay/replayed.js";

/** Options of `follow()`. */
export interface FollowOptions {
  /** Stop following when aborted (the run goes on). */
  signal?: AbortSignal;
  /** Show a progress bar (in place in notebooks, a terminal line elsewhere). Default true. */
  progress?: boolean;
  /** Called with every event of the run's log not seen before. */
  onEvent?: (e: LoopEvent) => void;
}

/** A live handle on a detached run. */
export class AttachedRun {
  /** Every step's metrics, oldest first: the run's whole history when attached, then each step as this handle sees it. */
  readonly history: StepMetrics[] = [];
  /** The run's log as this handle has seen it: its last LOG_KEEP events (state changes, log lines, steps, evaluations). */
  readonly events: LoopEvent[] = [];
  private last: LoopStatus;

  private constructor(
    readonly name: string,
    private readonly app: App,
    private readonly loop: PoolHandle<RunLoopService>,
    private readonly reader: LoopLogReader,
    status: LoopStatus,
  ) {
    this.last = status;
  }

  /** Attaches to run `name` (the embedded local head, HEARTH_HEAD, or `head`). A name with no detached run is a clear error. */
  static async open(name: string, opts: RunClientOptions = {}): Promise<AttachedRun> {
    const app = await connect({ name, head: opts.head });
    try {
      const status = await readLoopStatus(app.objects, name);
      if (!status) throw new HearthError(`no detached run named '${name}' on this cluster (hearth runs lists them; start one with hearth train search-r1 --detach)`);
      const run = new AttachedRun(name, app, await loopOf(app), new LoopLogReader(app.objects, name), status);
      run.history.push(...((await readRunState(app, name))?.history ?? []));
      await run.refresh();
      return run;
    } catch (err) {
      if (app.reattached) await app.disconnect();
      else await app.close(); // opened only to find no run: nothing is left behind
      throw err;
    }
  }

  /** The status last seen (`status()` reads a fresh one). */
  get state(): LoopStatus {
    return this.last;
  }

  /** Reads the events since the last look (steps join `history`); returns them. */
  async refresh(): Promise<LoopEvent[]> {
    const events = await this.reader.next();
    for (const e of events) this.see(e);
    this.last = (await readLoopStatus(this.app.objects, this.name)) ?? this.last;
    return events;
  }

  /** The run's status now. */
  async status(): Promise<LoopStatus> {
    await this.refresh();
    return this.last;
  }

  /**
   * Follows the run with a progress bar until it is done, failed or paused,
   * or until the kernel is interrupted or `signal` aborts (the run goes on);
   * resolves with the status it stopped following at.
   */
  async follow(opts: FollowOptions = {}): Promise<LoopStatus> {
    const start = await this.status();
    const bar: ProgressBar | null = opts.progress === false ? null : progress(start.total, { label: this.name });
    bar?.update(start.step, start.state);
    const stop = new AbortController();
    opts.signal?.addEventListener("abort", () => stop.abort(), { once: true });
    const onSigint = (): void => stop.abort();
    const watch = inNotebook();
    if (watch) process.on("SIGINT", onSigint);
    let end: LoopStatus | undefined;
    try {
      end = await followRun(this.app.objects, this.name, this.reader, (e) => {
        this.see(e);
        opts.onEvent?.(e);
        if (e.type === "step") bar?.update(e.step, stepRow(e.metrics).trim());
        else if (e.type === "state") bar?.update(bar.value, e.state);
      }, { signal: stop.signal, until: (s) => s.state === "paused" });
      this.last = end;
      return end;
    } finally {
      if (watch) process.off("SIGINT", onSigint);
      const s = end ?? this.last;
      const why = s.state === "failed" ? `failed: ${s.why ?? "?"}` : s.state === "done" ? `done: held-out EM ${s.evalEm !== undefined ? `${(s.evalEm * 100).toFixed(1)}%` : "?"}` : s.state === "paused" ? "paused (resume() to go on)" : "stopped following (the run goes on)";
      bar?.finish(`step ${s.step}/${s.total}: ${why}`);
    }
  }

  /** A held step's scored samples (default the latest; the loop keeps the last --keep-steps). */
  async samples(step?: number): Promise<{ step: number; samples: ScoredSample[]; words?: EnvWords }> {
    return this.loop.call("samples", step);
  }

  /** A held step's trajectories as a table. */
  async trajectories(step?: number): Promise<DataTable> {
    const r = await this.samples(step);
    return trajectoryTable(r.samples, { step: r.step, words: r.words });
  }

  /** Rescores a held step's samples with `fn`, here: the run and its samples are untouched. */
  async rescore(step: number, fn: RewardFn): Promise<RescoreView> {
    const r = await this.samples(step);
    const groupSize = this.last.options?.groupSize;
    return rescoreSamples(r.step, r.samples, fn, typeof groupSize === "number" ? groupSize : undefined);
  }

  /**
   * Replays a held sample exactly on the run's rollout executors (see
   * AgentRun.replay): its tokens with their probabilities and alternatives,
   * and what-if branches from any point.
   */
  async replay(o: ReplayOptions & { version?: number }): Promise<EpisodeReplay> {
    const json = await this.take<ReplayJSON>((await this.loop.call("replay", o)).episode);
    return new EpisodeReplay(json, async (ask) => {
      const b = await this.loop.call("branch", ask);
      return { episode: await this.take<ReplayJSON>(b.episode), ...(b.reward !== undefined ? { reward: b.reward } : {}) };
    });
  }

  /** Reads an object the loop put for this handle, and deletes it. */
  private async take<T>(ref: ObjectRef): Promise<T> {
    try {
      return await this.app.objects.get<T>(ref);
    } finally {
      await this.app.objects.delete(ref.key);
    }
  }

  /** Holds the run after its step in flight; resolves once it holds (or has ended). */
  async pause(): Promise<LoopStatus> {
    await this.control("pause");
    return followRun(this.app.objects, this.name, this.reader, (e) => this.see(e), { until: (s) => s.state === "paused", deadline: Date.now() + STOP_WAIT_MS }).then((s) => (this.last = s));
  }

  /** Lets a paused run go on. */
  async resume(): Promise<LoopStatus> {
    return this.control("resume");
  }

  /** Runs exactly one step of the paused run (it stays paused); its metrics. */
  async step(): Promise<StepMetrics> {
    const m = await this.loop.call("step");
    await this.refresh();
    return m;
  }

  /** Scores the run's next steps with a module's exported reward function (`null`: exact match again). */
  async setReward(ref: ServiceSource | null): Promise<LoopStatus> {
    return (this.last = (await this.loop.call("setReward", ref)) ?? this.last);
  }

  /** Every trainer rank's exact state digest and every rollout's policy digest, of the paused run. */
  async digests(): ReturnType<RunLoopService["digests"]> {
    return this.loop.call("digests");
  }

  /**
   * Ends the run after its step in flight (final evaluation, checkpoint,
   * report; services released) and, unless `wait` is false, follows it to
   * the end (at most `timeoutMs`).
   */
  async stop(opts: { wait?: boolean; timeoutMs?: number } = {}): Promise<LoopStatus> {
    const asked = await this.control("stop");
    if (opts.wait === false) return asked;
    return (this.last = await followRun(this.app.objects, this.name, this.reader, (e) => this.see(e), { deadline: Date.now() + (opts.timeoutMs ?? STOP_WAIT_MS) }));
  }

  /** Leaves the run (it goes on): this handle's connection is closed. */
  async detach(): Promise<void> {
    await this.app.disconnect();
  }

  private async control(what: "pause" | "resume" | "stop"): Promise<LoopStatus> {
    const s = await this.status();
    if (s.state === "done" || s.state === "failed") throw new HearthError(`run '${this.name}' is ${s.state}${s.why ? ` (${s.why})` : ""}: nothing to ${what}`);
    return (this.last = (await this.loop.call(what)) ?? s);
  }

  private see(e: LoopEvent): void {
    this.events.push(e);
    if (this.events.length > LOG_KEEP) this.events.splice(0, this.events.length - LOG_KEEP);
    if (e.type === "step" && e.step > (this.history.at(-1)?.step ?? 0)) this.history.push(e.metrics);
  }
}
