/**
 * The client side of runs that live on the cluster: start one (`detachRun`:
 * the loop becomes a service of the run's app, loop-service.ts), list them,
 * attach (history so far, then live events), pause, resume, stop, and fetch
 * a finished run's outputs. A client holds nothing of the run: it opens the
 * run's app as a driver (so only that app's drivers and admin get in),
 * reads the status and log the loop writes (run-log.ts), and disconnects.
 */
import path from "node:path";
import type { ObjectCache } from "../../cache/object-cache.js";
import { connect } from "../../connect.js";
import { hearthHome } from "../../engines/local.js";
import { findSlurmHead } from "../../engines/slurm/index.js";
import { HearthError } from "../../errors/index.js";
import type { App } from "../../runtime/app.js";
import type { PoolHandle } from "../../runtime/handles.js";
import { HeadClient } from "../../runtime/head-client.js";
import { fetchTree, resumeTreeKey, shipTree, type RunLoopService, type ShippedTree } from "./loop-service.js";
import { readResume } from "../state/checkpoint.js";
import type { RunOptions } from "../run/options.js";
import { runOptions } from "../run/open.js";
import type { EnvironmentPackage } from "../run/recipe.js";
import { LOOP_CLASS } from "../services/modules.js";
import { readRunState } from "../state/run-state.js";
import { LoopLogReader, loopOutputsKey, readLoopStatus, type LoopEvent, type LoopStatus } from "../state/run-log.js";

/** The loop's service name in its run's app. */
export const LOOP_SERVICE = "loop";
/** What the loop reserves: it mostly waits on its siblings (tokenising and scoring are light). */
export const LOOP_RESREQ = "cpu=0.1";

/** How often an attacher looks for new events (a get that returns "not modified" when there are none). */
export const ATTACH_POLL_MS = 250;

/** Where to find the head: `head`, else HEARTH_HEAD, else the embedded local one. */
export interface RunClientOptions {
  head?: string;
}

/** Opens the run's loop service (the same declaration every client makes, so it names the running one). */
export async function loopOf(app: App): Promise<PoolHandle<RunLoopService>> {
  return (await app.service<RunLoopService>(
    LOOP_CLASS,
    { name: LOOP_SERVICE, resreq: LOOP_RESREQ, warmup: 1, max: 1, concurrency: 8, drivesApp: true, idleTimeout: 0 },
  )) as PoolHandle<RunLoopService>;
}

/**
 * Starts run `given.name` with its loop on the cluster and returns its
 * status at once (state "warming"). The options are checked here first, so
 * a bad flag fails before anything starts.
 */
export async function detachRun(given: Partial<RunOptions>, pkg: EnvironmentPackage, opts: RunClientOptions = {}): Promise<LoopStatus> {
  if (given.out !== undefined) throw new HearthError("--out does not apply to a detached run: its loop writes where it runs; get its outputs with `hearth fetch NAME --out DIR`");
  const { opts: layered } = runOptions(given, pkg);
  if (given.resume !== undefined) readResume(given.resume); // a folder that is no checkpoint fails here, before anything starts
  const slurm = layered.engine === "slurm";
  // On Slurm the loop's own job is submitted from here (its agent runs it as you: it submits the run's jobs); once it runs, its own engine takes the app's jobs over.
  const app = await connect({
    ...given.connectOptions,
    name: layered.name,
    head: opts.head ?? given.head,
    ...(slurm
      ? {
          engine: "slurm",
          partition: layered.partition,
          account: layered.account,
          extraArgs: layered.sbatchArgs.length > 0 ? layered.sbatchArgs : undefined,
          slurm: layered.bind !== undefined ? { ...given.connectOptions?.slurm, bind: layered.bind } : given.connectOptions?.slurm,
        }
      : {}),
  });
  try {
    const loop = await loopOf(app);
    const { head: _head, ...flags } = given;
    let rest: Partial<RunOptions> = flags;
    if (slurm) {
      // The loop reaches the head that runs now (no bind), with its key file; HEARTH_HOME is on the file system the nodes share.
      const home = hearthHome(given.connectOptions?.local?.home);
      const curveKeys = findSlurmHead(home)?.curveKeys ?? given.connectOptions?.slurm?.curveKeys ?? null;
      rest = { ...flags, bind: undefined, connectOptions: { ...given.connectOptions, local: { home }, slurm: { ...given.connectOptions?.slurm, bind: undefined, curveKeys } } };
    }
    if (given.resume !== undefined) {
      // The loop may run on another node: the checkpoint travels through the cache (the loop writes it where it runs).
      await app.objects.delete(resumeTreeKey(layered.name));
      await app.objects.put(await shipTree(app.objects, path.resolve(given.resume)), { key: resumeTreeKey(layered.name) });
    }
    return await loop.call("start", rest, pkg.module);
  } finally {
    await app.disconnect();
  }
}

/**
 * Opens the app of run `name` as its driver, runs `body`, disconnects. A
 * name with no run (no status object) is a clear error, and an app opened
 * only to find that out is released again.
 */
export async function withRun<T>(name: string, opts: RunClientOptions, body: (app: App, status: LoopStatus) => Promise<T>): Promise<T> {
  const app = await connect({ name, head: opts.head });
  let status: LoopStatus | undefined;
  try {
    status = await readLoopStatus(app.objects, name);
    if (!status) throw new HearthError(`no detached run named '${name}' on this cluster (hearth runs lists them)`);
    return await body(app, status);
  } finally {
    if (!app.reattached && !status) await app.close();
    else await app.disconnect();
  }
}

/** Asks run `name`'s loop to pause, resume or stop (it acts between steps); returns its status. */
export async function controlRun(name: string, what: "pause" | "resume" | "stop", opts: RunClientOptions = {}): Promise<LoopStatus> {
  return withRun(name, opts, async (app, status) => {
    if (status.state === "done" || status.state === "failed") throw new HearthError(`run '${name}' is ${status.state}${status.why ? ` (${status.why})` : ""}: nothing to ${what}`);
    const loop = await loopOf(app);
    return (await loop.call(what)) ?? status;
  });
}

/** How long `hearth stop` waits for the run to end by default: its step in flight, the final evaluation, the checkpoint and the report. */
export const STOP_WAIT_MS = 10 * 60_000;

/** How `stopRun` waits. */
export interface StopRunOptions extends RunClientOptions {
  /** Wait for the run to be done or failed (default); false: return once the loop has the request, as it stands then. */
  wait?: boolean;
  /** The wait's deadline (default STOP_WAIT_MS): past it a HearthError says what the run is doing; the run goes on stopping. */
  timeoutMs?: number;
  /** Each event the run logs after the stop was asked (its last step, the final evaluation, where its outputs went). */
  onEvent?: (e: LoopEvent) => void;
  signal?: AbortSignal;
}

/**
 * Stops run `name` after its step in flight and, unless `wait` is false,
 * waits until it has ended, as `docker stop` does: resolved, a "done" run's
 * outputs are in the cache (`fetchRun` works at once) and its services are
 * released; a run that failed while stopping resolves with state "failed".
 * A run already done or failed resolves with that status at once (as
 * `docker stop` of a stopped container succeeds): `stop && fetch` works
 * whenever it runs.
 */
export async function stopRun(name: string, opts: StopRunOptions = {}): Promise<LoopStatus> {
  return withRun(name, opts, async (app, status) => {
    if (status.state === "done" || status.state === "failed") return status;
    // Events before the request are history: only what the run does from now on is progress.
    const reader = new LoopLogReader(app.objects, name);
    await reader.next();
    const asked = (await (await loopOf(app)).call("stop")) ?? status;
    if (opts.wait === false) return asked;
    const timeoutMs = opts.timeoutMs ?? STOP_WAIT_MS;
    const deadline = Date.now() + timeoutMs;
    const end = await followRun(app.objects, name, reader, opts.onEvent ?? (() => undefined), { signal: opts.signal, until: () => Date.now() > deadline });
    if (end.state !== "done" && end.state !== "failed" && !opts.signal?.aborted) {
      const within = timeoutMs < 1000 ? `${timeoutMs} ms` : `${Math.round(timeoutMs / 1000)} s`;
      throw new HearthError(`run '${name}' did not end within ${within} of the stop: it is ${end.state} at step ${end.step} of ${end.total}, and goes on stopping (hearth attach ${name} follows it)`);
    }
    return end;
  });
}

/**
 * Follows run `name`: `onEvent` gets every event of its log so far, then
 * each new one, until the run is done or failed (resolves with its final
 * status) or `signal` aborts (resolves with the status then; the run goes on).
 */
export async function attachRun(name: string, onEvent: (e: LoopEvent) => void, opts: RunClientOptions & { signal?: AbortSignal } = {}): Promise<LoopStatus> {
  return withRun(name, opts, (app) => followRun(app.objects, name, new LoopLogReader(app.objects, name), onEvent, { signal: opts.signal }));
}

/**
 * Reads run `name`'s log with `reader` and hands each new event to
 * `onEvent`, every ATTACH_POLL_MS, until the run is done or failed, `until`
 * says so of its status, `signal` aborts, or `deadline` (epoch ms) passes
 * (a HearthError then); resolves with the status it ended on.
 */
export async function followRun(
  objects: ObjectCache,
  name: string,
  reader: LoopLogReader,
  onEvent: (e: LoopEvent) => void,
  opts: { signal?: AbortSignal; until?: (s: LoopStatus) => boolean; deadline?: number } = {},
): Promise<LoopStatus> {
  for (;;) {
    for (const e of await reader.next()) onEvent(e);
    const status = await readLoopStatus(objects, name);
    if (!status) throw new HearthError(`run '${name}' has no status any more: its app was released (by its keep-alive, or closed)`);
    if (status.state === "done" || status.state === "failed" || opts.until?.(status)) {
      for (const e of await reader.next()) onEvent(e);
      return status;
    }
    if (opts.signal?.aborted) return status;
    if (opts.deadline !== undefined && Date.now() > opts.deadline) throw new HearthError(`run '${name}' is still ${status.state} at step ${status.step} of ${status.total} after the wait asked for; it goes on`);
    await new Promise<void>((resolve) => {
      const t = setTimeout(done, ATTACH_POLL_MS);
      function done(): void {
        clearTimeout(t);
        opts.signal?.removeEventListener("abort", done);
        resolve();
      }
      opts.signal?.addEventListener("abort", done, { once: true });
    });
  }
}

/** Writes finished run `name`'s outputs (metrics.jsonl, report, checkpoint) into `dir`; returns the bytes fetched. */
export async function fetchRun(name: string, dir: string, opts: RunClientOptions = {}): Promise<number> {
  return withRun(name, opts, async (app, status) => {
    if (status.state !== "done") throw new HearthError(`run '${name}' is ${status.state}: its outputs are put in the cache when it ends (hearth stop ${name} ends it after its step)`);
    return fetchTree(app.objects, await app.objects.get<ShippedTree>(loopOutputsKey(name)), dir);
  });
}

/**
 * A run driven from outside the cluster (a CLI or notebook driver, no loop
 * service), as `hearth runs` lists it from its run state: "attached" while a
 * driver is connected, "idle" while its executors wait for one (the app's
 * keep-alive).
 */
export interface AttachedRunListing {
  name: string;
  state: "attached" | "idle";
  /** Steps completed (its driver decides how many more). */
  step: number;
  /** The last held-out exact match in its history, and its step. */
  evalEm?: number;
  evalStep?: number;
  /** Drivers connected to its app. */
  drivers: number;
}

/** A row of `hearth runs`: a run that lives on the cluster, or one a driver elsewhere runs. */
export type RunListing = LoopStatus | AttachedRunListing;

/** Every Search-R1 run of the cluster, detached or driven from elsewhere (needs the admin credential: the cluster secret). */
export async function listRuns(endpoint: string): Promise<RunListing[]> {
  const { client } = await HeadClient.open(endpoint, { app: "_hearth-status" }, { timeoutMs: 5000, admin: true });
  let apps: Array<{ name: string; drivers: number; services: Array<{ name: string; state: string }> }>;
  try {
    apps = ((await client.control("status", { all: true })).apps as typeof apps).filter((a) => a.name !== "_hearth-status");
    await client.control("close-app", {});
  } finally {
    client.close();
  }
  const runs: RunListing[] = [];
  for (const a of apps) {
    const has = (n: string): boolean => a.services.some((s) => s.name === n);
    if (has(LOOP_SERVICE)) {
      const s = await withRun(a.name, { head: endpoint }, async (_app, st) => st).catch(() => undefined);
      if (s) runs.push(s);
    } else if (has("rollout") && has("trainer")) {
      const row = await attachedListing(endpoint, a.name, a.drivers).catch(() => undefined);
      if (row) runs.push(row);
    }
  }
  return runs;
}

/** A driven run's row, from its run state (read as one more driver of its app, which then leaves). */
async function attachedListing(endpoint: string, name: string, drivers: number): Promise<AttachedRunListing | undefined> {
  const app = await connect({ name, head: endpoint });
  try {
    const state = await readRunState(app, name);
    if (!state) return undefined;
    const lastEval = [...state.history].reverse().find((m) => m.eval_em !== undefined);
    return { name, state: drivers > 0 ? "attached" : "idle", step: state.step, evalEm: lastEval?.eval_em, evalStep: lastEval?.step, drivers };
  } finally {
    await app.disconnect();
  }
}
