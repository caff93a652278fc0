/**
 * What a run that lives on the cluster (loop-service.ts) tells its attachers,
 * through the object cache: its status (`runs/<name>/loop`: state, step
 * of total, last held-out EM, where its loop runs, its outputs once written)
 * and its event log (`runs/<name>/events`).
 *
 * The log is one object the loop appends to, a patch per event, so an
 * attacher that holds version v gets only the events after v (an incremental
 * get); nobody waits for an attacher, so a slow or absent one never slows a
 * step. It stays bounded: after LOG_REBASE patches the loop writes a new
 * base holding the last LOG_KEEP events. Every event carries a sequence
 * number, so an attacher whose copy predates a re-base skips what it saw.
 */
import type { ObjectCache } from "../../cache/object-cache.js";
import { HeadRestartedError, ObjectNotFoundError } from "../../errors/index.js";
import type { RunEvent } from "../run/events.js";
import { runKeys } from "./run-objects.js";

/** Where a run that lives on the cluster stands. */
export type LoopState = "warming" | "running" | "paused" | "stopping" | "done" | "failed";

/** The status object of a detached run. */
export interface LoopStatus {
  name: string;
  state: LoopState;
  /** Why it failed (state "failed"). */
  why?: string;
  /** Steps completed, and the step it runs to. */
  step: number;
  total: number;
  /** The last held-out exact match measured (0..1), and at which step. */
  evalEm?: number;
  evalStep?: number;
  /** When the loop started (epoch ms), and when the status was written. */
  startedAt: number;
  updatedAt: number;
  /** Where the loop runs: its executor, agent and host, and its output folder there. */
  where: { executorId: string; agentId: string; host: string; out: string };
  /** The flags the run was started with (a loop that takes over a lost one's run starts from them). */
  options?: Record<string, unknown>;
  /** The held-out evaluation before its first step (the report's start); set once the loop is past it. */
  startEval?: { step: number; em: number; calls: number; emBy?: Record<string, number> };
  /** The environment package the run is of (a loop that takes over imports it). */
  env?: { module: string; export: string };
  /** The reward module in use, when `setReward` replaced exact match. */
  reward?: { module: string; export: string };
  /** Loop executors lost and taken over: when, at which step, which one was lost, which took over. */
  takeovers?: Array<{ at: number; step: number; lost: string; by: string }>;
}

/** How long a write of the loop waits out a head restart (the new head answers "restarted" until its recovery window closes). */
export const HEAD_RESTART_WAIT_MS = 60_000;

/** Runs `fn`, again every 500 ms while it fails with a head restart, for at most HEAD_RESTART_WAIT_MS. */
export async function throughHeadRestarts<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + HEAD_RESTART_WAIT_MS;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!(err instanceof HeadRestartedError) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

/** What a detached run's log records: a run event, a log line, or a change of state. */
export type LoopEventBody = RunEvent | { type: "log"; text: string } | { type: "state"; state: LoopState; why?: string };

/** One entry of the log: the body, its sequence number (from 1) and when (epoch ms). */
export type LoopEvent = LoopEventBody & { seq: number; at: number };

/** The key of run `name`'s status. */
export function loopStatusKey(name: string): string {
  return `${runKeys(name)}loop`;
}

/** The key of run `name`'s event log. */
export function loopEventsKey(name: string): string {
  return `${runKeys(name)}events`;
}

/** The key of a finished run's outputs (metrics.jsonl, report, checkpoint as cache objects: loop-service.ts ShippedTree); `hearth fetch` reads them. */
export function loopOutputsKey(name: string): string {
  return `${runKeys(name)}outputs`;
}

/** Patches on one base at most; then a new base. */
export const LOG_REBASE = 200;
/** Events a new base keeps (the history of steps is also in the run state and metrics.jsonl). */
export const LOG_KEEP = 500;

/** Appends a run's events to its log (the loop's side). Appends are serialised in order. */
export class LoopLogWriter {
  private seq = 0;
  private patches = 0;
  private recent: LoopEvent[] = [];
  private chain: Promise<unknown> = Promise.resolve();
  private failure: unknown;

  constructor(
    private readonly objects: ObjectCache,
    private readonly name: string,
  ) {}

  /** Starts a fresh log (a new run of the name replaces the old one's). */
  async open(): Promise<void> {
    await this.objects.delete(loopEventsKey(this.name));
    await this.objects.put([], { key: loopEventsKey(this.name) });
  }

  /** Goes on with the log a lost loop wrote (a loop that takes its run over): numbering continues, the next write is a new base. */
  async resume(): Promise<void> {
    let all: LoopEvent[];
    try {
      all = await this.objects.get<LoopEvent[]>(loopEventsKey(this.name));
    } catch (err) {
      if (!(err instanceof ObjectNotFoundError)) throw err;
      return this.open();
    }
    this.recent = all.slice(-LOG_KEEP);
    this.seq = all.at(-1)?.seq ?? 0;
    this.patches = LOG_REBASE;
  }

  /** Queues an event; `flush()` awaits it. Never throws here: a failed write is raised by the next flush. */
  append(e: LoopEventBody): void {
    const event = { ...e, seq: ++this.seq, at: Date.now() } as LoopEvent;
    this.recent.push(event);
    if (this.recent.length > LOG_KEEP) this.recent.splice(0, this.recent.length - LOG_KEEP);
    // Decided (and the new base's events taken) now, in append order: a base taken later would also hold events still queued as patches.
    const base = this.patches >= LOG_REBASE ? [...this.recent] : undefined;
    this.patches = base ? 0 : this.patches + 1;
    this.chain = this.chain.then(() =>
      throughHeadRestarts(async () => {
        if (base) await this.objects.update(loopEventsKey(this.name), base);
        else await this.objects.patch(loopEventsKey(this.name), [event]);
      }),
    ).catch((err: unknown) => {
      this.failure ??= err;
    });
  }

  /** Waits for the queued appends; throws the first one that failed. */
  async flush(): Promise<void> {
    await this.chain;
    if (this.failure) throw this.failure;
  }
}

/**
 * Reads a run's log incrementally (the attacher's side): each `next()`
 * returns the events not returned before, fetching only the patches this
 * client has not seen.
 */
export class LoopLogReader {
  private lastSeq = 0;

  constructor(
    private readonly objects: ObjectCache,
    private readonly name: string,
  ) {}

  /** The events since the previous call (all there are, the first time). */
  async next(): Promise<LoopEvent[]> {
    const all = await this.objects.get<LoopEvent[]>(loopEventsKey(this.name));
    const fresh: LoopEvent[] = [];
    for (const e of all) {
      if (e.seq <= this.lastSeq) continue;
      fresh.push(e);
      this.lastSeq = e.seq;
    }
    return fresh;
  }
}

/** Run `name`'s status, or undefined when it has none (no detached run of that name). */
export async function readLoopStatus(objects: ObjectCache, name: string): Promise<LoopStatus | undefined> {
  try {
    return await objects.get<LoopStatus>(loopStatusKey(name));
  } catch (err) {
    if (err instanceof ObjectNotFoundError) return undefined;
    throw err;
  }
}
