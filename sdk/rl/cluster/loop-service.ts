/**
 * RunLoopService: a run's training loop as a service on the cluster, so that
 * the run outlives the notebook or terminal that started it. One executor
 * per run, in the run's own app (the app is named after the run). Declared
 * with `drivesApp`, so its agent hands it that app's driver token, and only
 * that: the loop opens its own app as a driver (as the CLI would) and
 * drives its sibling services, the rollout pool and the trainer gang, with
 * the very AgentRun the CLI uses.
 *
 * It writes what it does to the object cache (run-log.ts: a status object
 * and an append-only event log) and its outputs (metrics.jsonl, report,
 * checkpoint) to a folder where it runs; when the run ends it also puts that
 * folder into the cache, for `hearth fetch`. Clients call `pause`, `resume`
 * and `stop`; each answers at once, and the loop acts between steps. While
 * paused, `step` runs exactly one step; `setReward` swaps the reward for a
 * module's function from the next step; `samples` and `digests` let an
 * attached notebook look at a step's trajectories and at every member's state.
 *
 * The run outlives its loop's executor too: the status holds the flags the
 * run was started with, so a loop executor that starts while the status
 * says another one is running it (the pool replaces a lost member) takes
 * the run over from its last completed step: it reattaches to the warm
 * rollouts and trainers exactly as a returning driver does, or fails
 * naming what was lost. A head restart is ridden out the same way: the
 * loop's connection is renewed and the step in flight runs again.
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { HeadRestartedError, HearthError } from "../../errors/index.js";
import type { ExecutorContext } from "../../runtime/types.js";
import { APP_TOKEN_ENV } from "../../wire/auth.js";
import { warmStartClock } from "../run/events.js";
import { finishSession } from "../report/finish.js";
import { emByCategory } from "../run/pipeline.js";
import type { ServiceSource } from "../run/options.js";
import { LoopLogWriter, loopOutputsKey, loopStatusKey, readLoopStatus, throughHeadRestarts, type LoopState, type LoopStatus } from "../state/run-log.js";
import { AgentRun, type RunOptions, type StepMetrics } from "../run/run.js";
import type { EnvWords, RewardFn, ScoredSample } from "../types.js";
import type { EnvironmentPackage } from "../run/recipe.js";
import { replayKeys, runKeys } from "../state/run-objects.js";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { ReplayOptions } from "../replay/replay.js";
import type { BranchAsk } from "../replay/replayed.js";
import { dropTree, fetchTree, shipTree, type ShippedTree } from "../state/tree.js";
import { loadPackage, loadReward, type PackageRef } from "./loop-modules.js";

export { dropTree, fetchTree, shipTree, loadPackage, loadReward, type ShippedTree, type PackageRef };

/** The key under which a client ships the checkpoint a detached run resumes from (`--detach --resume DIR`). */
export function resumeTreeKey(name: string): string {
  return `${runKeys(name)}resume-from`;
}

/** Where a loop writes its outputs: under its executor's own temporary folder (its app's user can write there). */
export function loopOutDir(name: string): string {
  return path.join(os.tmpdir(), "hearth-runs", name);
}

/** States in which a run's loop is (or should be) running. */
const ACTIVE: ReadonlySet<LoopState> = new Set(["warming", "running", "paused", "stopping"]);

/** Times the loop renews its connection after head restarts, in a row, before it gives up. */
const HEAD_RESTARTS = 5;

/**
 * How the loop connects: with its app's token to the head its agent names;
 * on Slurm also with the run's Slurm settings (HEARTH_HOME, the head's key
 * file, the jobs' environment), since its own engine submits the run's jobs.
 */
function loopConnect(options: Partial<RunOptions>, credential: NonNullable<RunOptions["connectOptions"]>["credential"]): RunOptions["connectOptions"] {
  return options.engine === "slurm" ? { ...options.connectOptions, credential } : { credential };
}

/** The service. */
export class RunLoopService {
  private ctx!: ExecutorContext;
  private log!: LoopLogWriter;
  private status?: LoopStatus;
  private run?: AgentRun;
  private running?: Promise<void>;
  private paused = false;
  private stopAsked = false;
  /** Wakes the loop while it is paused. */
  private wake?: () => void;
  /** A step asked for while paused (`step()`), answered when it is done. */
  private oneStep?: { resolve: (m: StepMetrics) => void; reject: (err: unknown) => void };
  /** The reward swapped in (applied to each run the loop creates); undefined: the environment's own. */
  private reward?: RewardFn;
  /** The environment package the run is of (its module, which the loop imports). */
  private pkg?: EnvironmentPackage;
  /** Writes of the status, in order. */
  private writes: Promise<unknown> = Promise.resolve();

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
    this.log = new LoopLogWriter(ctx.objects, ctx.app);
    // Started while the status says another executor runs the loop: that one was lost (a pool of one replaces its member).
    const prior = await readLoopStatus(ctx.objects, ctx.app);
    if (!prior || !ACTIVE.has(prior.state) || prior.where.executorId === ctx.executorId) return;
    try {
      await this.takeOver(prior);
    } catch (err) {
      // Said in the status (what `hearth runs` and attachers read); the executor itself is fine.
      this.status = { ...prior, state: "failed", why: (err as Error).message ?? String(err), updatedAt: Date.now() };
      await this.writeStatus();
    }
  }

  /**
   * Starts the run (named after this app) with `options` (the CLI's flags,
   * as plain data) and answers at once with its status; the loop goes on
   * here until its steps are done or it is stopped.
   */
  async start(options: Partial<RunOptions>, env: PackageRef): Promise<LoopStatus> {
    if (this.running && (!this.status || ACTIVE.has(this.status.state))) throw new HearthError(`run '${this.ctx.app}' already runs on this loop (${this.status?.state ?? "starting"}); attach to it, or stop it first`);
    // A run of this name that ended (done or failed) is replaced by the new one.
    this.paused = false;
    this.stopAsked = false;
    this.pkg = await loadPackage(env);
    const { head, credential, out } = this.where();
    if (options.resume !== undefined) {
      // The client shipped the checkpoint through the cache (detachRun): written here, next to the outputs, and its objects dropped.
      const tree = await this.ctx.objects.get<ShippedTree>(resumeTreeKey(this.ctx.app));
      const dir = `${out}-resume-from`;
      rmSync(dir, { recursive: true, force: true });
      await fetchTree(this.ctx.objects, tree, dir);
      await dropTree(this.ctx.objects, tree);
      await this.ctx.objects.delete(resumeTreeKey(this.ctx.app));
      options = { ...options, resume: dir };
    }
    const now = Date.now();
    this.status = {
      name: this.ctx.app,
      state: "warming",
      step: 0,
      total: 0,
      startedAt: now,
      updatedAt: now,
      where: { executorId: this.ctx.executorId, agentId: this.ctx.agentId, host: this.ctx.host, out },
      options,
      env,
    };
    await this.log.open();
    await this.writeStatus();
    this.log.append({ type: "state", state: "warming" });
    this.running = this.loop({ ...options, name: this.ctx.app, head, out, replace: true, connectOptions: loopConnect(options, credential) });
    return this.status;
  }

  /** Holds the run after the step in flight (a no-op unless it is running). */
  pause(): LoopStatus | undefined {
    if (this.status?.state === "running" || this.status?.state === "warming") this.paused = true;
    return this.status;
  }

  /** Lets a paused run go on. */
  resume(): LoopStatus | undefined {
    this.paused = false;
    this.wake?.();
    return this.status;
  }

  /** Ends the run after the step in flight: metrics, checkpoint and report are written and its services released. */
  stop(): LoopStatus | undefined {
    this.stopAsked = true;
    this.wake?.();
    return this.status;
  }

  /** Runs exactly one step of a paused run (it stays paused); answers with the step's metrics. */
  async step(): Promise<StepMetrics> {
    const st = this.status?.state;
    if (st !== "paused" || !this.paused) throw new HearthError(`run '${this.ctx.app}' is ${st ?? "not started"}: step() runs one step of a paused run; pause it first`);
    if (this.oneStep) throw new HearthError(`run '${this.ctx.app}' is already running a step asked for while paused; await it first`);
    return new Promise<StepMetrics>((resolve, reject) => {
      this.oneStep = { resolve, reject };
      this.wake?.();
    });
  }

  /**
   * Scores the next steps with `ref`'s exported function (a module the
   * loop's host can read; `null` goes back to exact match). The step in
   * flight keeps the reward it started with.
   */
  async setReward(ref: ServiceSource | null): Promise<LoopStatus | undefined> {
    this.reward = ref === null ? undefined : await loadReward(ref);
    if (this.run) this.run.setReward(this.reward ?? this.run.task.environment.reward);
    if (this.status) {
      if (ref === null) delete this.status.reward;
      else this.status.reward = { module: path.resolve(ref.module), export: ref.export };
      this.log.append({ type: "log", text: `reward: ${ref === null ? "the environment's own (the default)" : `${ref.module}#${ref.export}`} from step ${this.status.step + 2 - (this.status.state === "paused" ? 1 : 0)}` });
      await this.writeStatus();
    }
    return this.status;
  }

  /** A held step's trajectories as scored samples (default the latest). */
  samples(step?: number): { step: number; samples: ScoredSample[]; words: EnvWords } {
    const run = this.need();
    const r = run.result(step);
    return { step: r.metrics.step, samples: r.samples, words: run.task.environment.words };
  }

  /**
   * Replays a held sample on the run's rollout executors (AgentRun.replay)
   * and puts the episode (tokens, probabilities, alternatives) in the cache
   * for the caller, who reads and deletes it: an episode outgrows a call's
   * reply.
   */
  async replay(o: ReplayOptions & { version?: number }): Promise<{ episode: ObjectRef }> {
    const run = this.need();
    const ep = await run.replay(o);
    return { episode: await run.app.objects.put(ep.toJSON(), { key: `${replayKeys(this.ctx.app)}loop-${Date.now()}-${Math.random().toString(36).slice(2)}`, scratch: true }) };
  }

  /** A what-if branch of a held sample (see EpisodeReplay), put in the cache like `replay`'s episode. */
  async branch(ask: BranchAsk): Promise<{ episode: ObjectRef; reward?: number }> {
    const run = this.need();
    const b = await run.branch(ask);
    return { episode: await run.app.objects.put(b.episode, { key: `${replayKeys(this.ctx.app)}loop-${Date.now()}-${Math.random().toString(36).slice(2)}`, scratch: true }), ...(b.reward !== undefined ? { reward: b.reward } : {}) };
  }

  /**
   * State digests of a paused run: every trainer rank's exact state (fp32
   * weights, AdamW moments, steps) and every rollout executor's policy,
   * after bringing each rollout to the trainers' latest publication.
   */
  async digests(): Promise<{ step: number; trainers: Array<{ rank: number; weights: string; moments: string; steps: number }>; policy: Awaited<ReturnType<AgentRun["digests"]>> }> {
    if (this.status?.state !== "paused") throw new HearthError(`run '${this.ctx.app}' is ${this.status?.state ?? "not started"}: digests are taken of a paused run (pause it first), so that no step moves them meanwhile`);
    const run = this.need();
    const trainers = await run.trainerGang.broadcast("stateDigest", Array.from({ length: run.opts.trainers }, () => [] as []));
    await run.syncRollouts();
    return { step: run.stepsDone, trainers, policy: await run.digests() };
  }

  /** The run's status as this loop holds it. */
  current(): LoopStatus | undefined {
    return this.status;
  }

  private need(): AgentRun {
    if (!this.run) throw new HearthError(`run '${this.ctx.app}' has no steps to show yet (${this.status?.state ?? "not started"})`);
    return this.run;
  }

  /** Where the loop finds its head and its app's credential, and writes its outputs. */
  private where(): { head: string; credential: NonNullable<RunOptions["connectOptions"]>["credential"]; out: string } {
    const token = process.env[APP_TOKEN_ENV];
    if (!token || !/^[0-9a-f]{64}$/.test(token)) throw new HearthError(`the loop of '${this.ctx.app}' has no app token: declare its service with { drivesApp: true }`);
    const head = process.env.HEARTH_HEAD;
    if (!head) throw new HearthError("the loop's executor has no HEARTH_HEAD (executors are started by an agent, which sets it)");
    const out = loopOutDir(this.ctx.app);
    mkdirSync(out, { recursive: true, mode: 0o700 });
    return { head, credential: { role: "driver" as const, id: this.ctx.app, app: this.ctx.app, key: Buffer.from(token, "hex") }, out };
  }

  /** Takes over the run of a lost loop executor, from its last completed step. */
  private async takeOver(prior: LoopStatus): Promise<void> {
    const { head, credential, out } = this.where();
    if (!prior.options || !prior.env) throw new HearthError(`run '${prior.name}' lost its loop executor ${prior.where.executorId}, and its status does not hold the flags and environment it was started with: it cannot be taken over`);
    this.pkg = await loadPackage(prior.env);
    const lost = `${prior.where.executorId} on ${prior.where.host}`;
    this.status = {
      ...prior,
      state: "warming",
      where: { executorId: this.ctx.executorId, agentId: this.ctx.agentId, host: this.ctx.host, out },
      takeovers: [...(prior.takeovers ?? []), { at: Date.now(), step: prior.step, lost, by: this.ctx.executorId }],
    };
    this.paused = prior.state === "paused";
    this.stopAsked = prior.state === "stopping";
    if (prior.reward) this.reward = await loadReward(prior.reward);
    await this.log.resume();
    this.log.append({ type: "log", text: `the run's loop executor ${lost} was lost (${prior.state} at step ${prior.step}); executor ${this.ctx.executorId} on ${this.ctx.host} takes it over from its last completed step` });
    this.log.append({ type: "state", state: "warming" });
    await this.writeStatus();
    // Not `resume` again: a run started from a checkpoint would start over from it rather than reattach.
    this.running = this.loop({ ...prior.options, resume: undefined, name: this.ctx.app, head, out, replace: false, connectOptions: loopConnect(prior.options, credential) }, prior);
  }

  private setState(state: LoopState, why?: string): void {
    this.status!.state = state;
    if (why !== undefined) this.status!.why = why;
    this.log.append(why === undefined ? { type: "state", state } : { type: "state", state, why });
  }

  /** Writes the status (writes queue in order; the latest wins). */
  private async writeStatus(): Promise<void> {
    const s = { ...this.status!, updatedAt: Date.now() };
    this.writes = this.writes.then(() =>
      throughHeadRestarts(async () => {
        try {
          await this.ctx.objects.update(loopStatusKey(s.name), s);
        } catch (err) {
          if (err instanceof HeadRestartedError) throw err;
          await this.ctx.objects.put(s, { key: loopStatusKey(s.name) });
        }
      }),
    );
    await this.writes;
  }

  /**
   * Opens the run: a new one, or (taking over from `prior`) the one the
   * trainers hold at `prior.step`, which must be exactly where it was.
   */
  private async open(given: Partial<RunOptions>, onEvent: RunOptions["onEvent"], prior?: { step: number; name: string }): Promise<AgentRun> {
    const run = await AgentRun.create({ ...given, onEvent, log: (text) => this.log.append({ type: "log", text }) }, this.pkg!);
    if (prior && run.stepsDone !== prior.step) {
      await run.disconnect().catch(() => undefined);
      throw new HearthError(
        `run '${prior.name}' cannot be taken over at step ${prior.step}: its trainers no longer hold its state (they restarted or were replaced with the loop), so it started again at step ${run.stepsDone}. What was lost: the trainers' weights and optimizer state after step ${prior.step}. Resume it from a checkpoint (--resume DIR)`,
      );
    }
    if (this.reward) run.setReward(this.reward);
    return run;
  }

  private async loop(given: Partial<RunOptions>, prior?: LoopStatus): Promise<void> {
    const t0 = performance.now();
    const status = this.status!;
    // A loop that takes over from a lost one continues its run when that one had started stepping.
    const takeover = prior?.startEval !== undefined ? prior : undefined;
    try {
      const clock = warmStartClock((e) => this.log.append(e));
      this.run = await this.open(given, clock.onEvent, takeover);
      let run = this.run;
      if (takeover) {
        // Its metrics.jsonl may have been on another node: rewritten from the run's own history.
        writeFileSync(path.join(run.opts.out, "metrics.jsonl"), run.history.map((m) => `${JSON.stringify(m)}\n`).join(""));
      } else {
        status.step = run.stepsDone;
        status.total = run.stepsDone + run.opts.steps;
        const first = await run.evaluate();
        status.evalEm = first.em;
        status.evalStep = run.stepsDone;
        status.startEval = { step: run.stepsDone, em: first.em, calls: first.callsPerSample, emBy: emByCategory(first) };
      }
      const startEval = status.startEval!;
      const setupSeconds = (performance.now() - t0) / 1000;
      const before = run.history.length;
      this.setState(this.paused ? "paused" : this.stopAsked ? "stopping" : "running");
      await this.writeStatus();
      run.trainUpTo(status.total);
      let restarts = 0;
      while (run.stepsDone < status.total && !this.stopAsked) {
        if (this.paused && !this.oneStep) {
          if (status.state !== "paused") {
            this.setState("paused");
            await this.writeStatus();
          }
          if (this.paused && !this.oneStep && !this.stopAsked) await new Promise<void>((resolve) => (this.wake = resolve));
          this.wake = undefined;
          if (!this.paused && !this.stopAsked) {
            this.setState("running");
            await this.writeStatus();
          }
          continue;
        }
        const one = this.oneStep;
        this.oneStep = undefined;
        try {
          const r = await run.step();
          restarts = 0;
          status.step = r.metrics.step;
          if (r.metrics.eval_em !== undefined) {
            status.evalEm = r.metrics.eval_em;
            status.evalStep = r.metrics.step;
          }
          await this.writeStatus();
          await this.log.flush();
          one?.resolve(r.metrics);
        } catch (err) {
          if (!(err instanceof HeadRestartedError) || ++restarts > HEAD_RESTARTS) {
            one?.reject(err);
            throw err;
          }
          // The head restarted under the step: its calls are gone with the old connection. A new one finds the app and its warm services (adopted), and the run where it was.
          this.log.append({ type: "log", text: `the head restarted during step ${run.stepsDone + 1}: reconnecting, and running the step again` });
          await run.disconnect().catch(() => undefined);
          this.run = run = await this.open({ ...given, replace: false }, clock.onEvent, { step: run.stepsDone, name: status.name });
          run.trainUpTo(status.total);
          if (one) this.oneStep = one;
        }
      }
      this.oneStep?.reject(new HearthError(`run '${status.name}' is stopping: no more steps`));
      this.oneStep = undefined;
      this.setState("stopping");
      await this.writeStatus();
      const done = await finishSession(run, { t0, startEval, setupSeconds, before, warmStart: clock.warmStart() });
      status.evalEm = done.finalEm;
      status.evalStep = run.stepsDone;
      this.log.append({ type: "log", text: `metrics: ${run.opts.out}/metrics.jsonl   report: ${done.report}   checkpoint: ${done.checkpoint}` });
      const tree = await shipTree(this.ctx.objects, run.opts.out);
      await this.ctx.objects.delete(loopOutputsKey(status.name));
      await this.ctx.objects.put(tree, { key: loopOutputsKey(status.name) });
      await run.release();
      this.run = undefined;
      this.setState("done");
      // The log first: whoever sees the status say "done" (hearth stop, attach) then finds every event in the log.
      await this.log.flush();
      await this.writeStatus();
    } catch (err) {
      this.setState("failed", (err as Error).message ?? String(err));
      await this.log.flush().catch(() => undefined);
      await this.writeStatus().catch(() => undefined);
      // The services stay warm (their state may be inspected or resumed); the app's keep-alive releases them.
      await this.run?.disconnect().catch(() => undefined);
    } finally {
      await this.log.flush().catch(() => undefined);
    }
  }
}
