/**
 * SearchR1Loop: a run's training loop as a service on the cluster, so that
 * the run outlives the notebook or terminal that started it. One executor
 * per run, in the run's own app (the app is named after the run). Declared
 * with `drivesApp`, so its agent hands it that app's driver token, and only
 * that: the loop opens its own app as a driver (as the CLI would) and
 * drives its sibling services, the rollout pool and the trainer gang, with
 * the very SearchR1Run the CLI uses.
 *
 * It writes what it does to the object cache (run-log.ts: a status object
 * and an append-only event log) and its outputs (metrics.jsonl, report,
 * checkpoint) to a folder where it runs; when the run ends it also puts that
 * folder into the cache, for `hearth fetch`. Clients call `pause`, `resume`
 * and `stop`; each answers at once, and the loop acts between steps.
 */
import { mkdirSync, readdirSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { ObjectCache } from "../cache/object-cache.js";
import { shipFolder, type FolderRef } from "../cache/folder.js";
import { HearthError } from "../errors/index.js";
import type { ExecutorContext } from "../runtime/types.js";
import { APP_TOKEN_ENV } from "../wire/auth.js";
import { warmStartClock } from "./events.js";
import { finishSession } from "./finish.js";
import { LoopLogWriter, loopOutputsKey, loopStatusKey, type LoopState, type LoopStatus } from "./run-log.js";
import { SearchR1Run, type SearchR1Options } from "./run.js";

/** A folder of the outputs and its subfolders, each shipped as cache objects (`rel` "" is the top). */
export interface ShippedTree {
  folders: Array<{ rel: string; folder: FolderRef }>;
}

/** Ships `dir` and every folder under it as cache objects. */
export async function shipTree(objects: ObjectCache, dir: string, rel = ""): Promise<ShippedTree> {
  const abs = path.join(dir, rel);
  const folders: ShippedTree["folders"] = [{ rel, folder: await shipFolder(objects, abs, { objects: true, forceObjects: true }) }];
  for (const n of readdirSync(abs).sort()) {
    if (statSync(path.join(abs, n)).isDirectory()) folders.push(...(await shipTree(objects, dir, path.join(rel, n))).folders);
  }
  return { folders };
}

/** Where a loop writes its outputs: under its executor's own temporary folder (its app's user can write there). */
export function loopOutDir(name: string): string {
  return path.join(os.tmpdir(), "hearth-runs", name);
}

/** The service. */
export class SearchR1Loop {
  private ctx!: ExecutorContext;
  private log!: LoopLogWriter;
  private status?: LoopStatus;
  private running?: Promise<void>;
  private paused = false;
  private stopAsked = false;
  /** Wakes the loop while it is paused. */
  private wake?: () => void;
  /** Writes of the status, in order. */
  private writes: Promise<unknown> = Promise.resolve();

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
    this.log = new LoopLogWriter(ctx.objects, ctx.app);
  }

  /**
   * Starts the run (named after this app) with `options` (the CLI's flags,
   * as plain data) and answers at once with its status; the loop goes on
   * here until its steps are done or it is stopped.
   */
  async start(options: Partial<SearchR1Options>): Promise<LoopStatus> {
    if (this.running) throw new HearthError(`run '${this.ctx.app}' already runs on this loop (${this.status?.state ?? "starting"}); attach to it, or stop it first`);
    const token = process.env[APP_TOKEN_ENV];
    if (!token || !/^[0-9a-f]{64}$/.test(token)) throw new HearthError(`the loop of '${this.ctx.app}' has no app token: declare its service with { drivesApp: true }`);
    const head = process.env.HEARTH_HEAD;
    if (!head) throw new HearthError("the loop's executor has no HEARTH_HEAD (executors are started by an agent, which sets it)");
    const out = loopOutDir(this.ctx.app);
    mkdirSync(out, { recursive: true, mode: 0o700 });
    const now = Date.now();
    this.status = {
      name: this.ctx.app,
      state: "warming",
      step: 0,
      total: 0,
      startedAt: now,
      updatedAt: now,
      where: { executorId: this.ctx.executorId, agentId: this.ctx.agentId, host: this.ctx.host, out },
    };
    await this.log.open();
    await this.writeStatus();
    this.log.append({ type: "state", state: "warming" });
    const credential = { role: "driver" as const, id: this.ctx.app, app: this.ctx.app, key: Buffer.from(token, "hex") };
    this.running = this.loop({ ...options, name: this.ctx.app, head, out, replace: true, connectOptions: { credential } });
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

  /** The run's status as this loop holds it. */
  current(): LoopStatus | undefined {
    return this.status;
  }

  private setState(state: LoopState, why?: string): void {
    this.status!.state = state;
    if (why !== undefined) this.status!.why = why;
    this.log.append(why === undefined ? { type: "state", state } : { type: "state", state, why });
  }

  /** Writes the status (writes queue in order; the latest wins). */
  private async writeStatus(): Promise<void> {
    const s = { ...this.status!, updatedAt: Date.now() };
    this.writes = this.writes.then(async () => {
      try {
        await this.ctx.objects.update(loopStatusKey(s.name), s);
      } catch {
        await this.ctx.objects.put(s, { key: loopStatusKey(s.name) });
      }
    });
    await this.writes;
  }

  private async loop(given: Partial<SearchR1Options>): Promise<void> {
    const t0 = performance.now();
    let run: SearchR1Run | undefined;
    const status = this.status!;
    try {
      const clock = warmStartClock((e) => this.log.append(e));
      run = await SearchR1Run.create({ ...given, onEvent: clock.onEvent, log: (text) => this.log.append({ type: "log", text }) });
      status.step = run.stepsDone;
      status.total = run.stepsDone + run.opts.steps;
      const first = await run.evaluate();
      status.evalEm = first.em;
      status.evalStep = run.stepsDone;
      const startEval = { step: run.stepsDone, em: first.em, searches: first.searchesPerSample };
      const setupSeconds = (performance.now() - t0) / 1000;
      const before = run.history.length;
      this.setState(this.paused ? "paused" : "running");
      await this.writeStatus();
      run.trainUpTo(status.total);
      while (run.stepsDone < status.total && !this.stopAsked) {
        if (this.paused) {
          if (status.state !== "paused") {
            this.setState("paused");
            await this.writeStatus();
          }
          await new Promise<void>((resolve) => (this.wake = resolve));
          this.wake = undefined;
          if (!this.paused && !this.stopAsked) {
            this.setState("running");
            await this.writeStatus();
          }
          continue;
        }
        const r = await run.step();
        status.step = r.metrics.step;
        if (r.metrics.eval_em !== undefined) {
          status.evalEm = r.metrics.eval_em;
          status.evalStep = r.metrics.step;
        }
        await this.writeStatus();
        await this.log.flush();
      }
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
      run = undefined;
      this.setState("done");
      await this.writeStatus();
    } catch (err) {
      this.setState("failed", (err as Error).message ?? String(err));
      await this.writeStatus().catch(() => undefined);
      // The services stay warm (their state may be inspected or resumed); the app's keep-alive releases them.
      await run?.disconnect().catch(() => undefined);
    } finally {
      await this.log.flush().catch(() => undefined);
    }
  }
}
