/**
 * Shared batched decode for the endpoint's requests. Requests that arrive
 * while the engine is idle wait a short gather window (or less: once every
 * open session has a request in, nobody else is coming) and go to the engine
 * as one batch; requests that arrive while a batch runs go in the next one.
 * So a step's concurrent sessions decode as wide as the environment path's
 * episodes do. A batch holds at most `maxRows` rows; past `maxQueued` rows
 * waiting, a request is refused at once (429 with Retry-After), never queued
 * without bound. Every request has a deadline (504 past it) and may be
 * aborted (a client that went away); a request that fails after its row
 * ran leaves the row unadopted.
 *
 * Engine sessions are counted: every row delivered holds one reference to
 * its batch's engine session, which its receiver gives back with `drop` once
 * nothing will continue the row (the agent session moved on, or ended); the
 * last one out releases the session. A continued row whose source the engine no longer holds is
 * retried once as a whole sequence (the caller's exact ids, prefilled).
 */
import type { BatchedRow, BatchRowSpec, TensorEngine } from "../../tensor/index.js";
import { EngineError } from "../../tensor/errors.js";
import { EndpointError } from "./endpoint-error.js";

/** What the batcher needs from a tensor engine (tests pass a scripted one). */
export type BatchEngine = Pick<TensorEngine, "batch" | "release">;

/** Settings of a batcher. */
export interface BatcherOptions {
  /** How long the first request of a batch waits for others (default 4 ms). */
  windowMs?: number;
  /** Rows per engine batch at most (default 256). */
  maxRows?: number;
  /** Rows waiting at most; beyond, 429 (default 4 × maxRows). */
  maxQueued?: number;
  /** Ids that end a turn. */
  eosIds: readonly number[];
  /** How many requests are expected now (open sessions with no request in flight, none answered yet): a batch goes at once when that many wait. */
  expected?: () => number;
}

/** One row's request: its spec, and the whole sequence to prefill should its source be gone. */
export interface RowRequest {
  spec: BatchRowSpec;
  /** The row's whole sequence so far (for a continued row): sent as a new row when the engine no longer holds the source. */
  whole?: readonly number[];
  deadline: number;
  signal?: AbortSignal;
  /** Told each token as it is sampled (the spec streams). */
  onToken?: (token: number) => void;
  /** Whose row it is (an episode session's id), kept in the log. */
  tag?: string;
}

/** A row's result, the engine session now holding it, and where its time went (ms waiting for a batch, ms the batch ran). */
export interface RowResult extends BatchedRow {
  session: number;
  row: number;
  queuedMs: number;
  engineMs: number;
}

/** One engine batch as the log keeps it: each row's tokens, its source (an earlier entry's row), seed and settings. */
export interface LoggedBatch {
  rows: Array<Omit<BatchRowSpec, "from" | "stream" | "tokens"> & { tokens: number[]; from?: { entry: number; row: number; expect: number }; tag?: string }>;
}

interface Waiting {
  req: RowRequest;
  submitted: number;
  resolve: (r: RowResult) => void;
  reject: (e: Error) => void;
  done: boolean;
  timer?: NodeJS.Timeout;
}

/** Batches rows for one engine (see the file's header). */
export class DecodeBatcher {
  private readonly queue: Waiting[] = [];
  private running = false;
  private gather?: NodeJS.Timeout;
  private readonly refs = new Map<number, number>();
  private closed = false;
  private holding = false;
  /** The engine batches run since `startLog` (a lease's, for replays), and which entry made each engine session. */
  private log?: { entries: LoggedBatch[]; bySession: Map<number, number> };
  /** Batches run and rows they held, requests refused for capacity (for the step's metrics). */
  readonly stats = { batches: 0, rows: 0, refused: 0, retried: 0, timedOut: 0 };
  private readonly windowMs: number;
  private readonly maxRows: number;
  private readonly maxQueued: number;

  constructor(private readonly engine: BatchEngine, private readonly o: BatcherOptions) {
    this.windowMs = o.windowMs ?? 4;
    this.maxRows = o.maxRows ?? 256;
    this.maxQueued = o.maxQueued ?? 4 * this.maxRows;
  }

  /** Samples one row (see the file's header); rejects with EndpointError 429 / 504 / 499-like aborts. */
  submit(req: RowRequest): Promise<RowResult> {
    if (this.closed) return Promise.reject(new EndpointError(503, "the endpoint is shutting down", { code: "shutting_down", retryAfter: 1 }));
    if (this.queue.length >= this.maxQueued) {
      this.stats.refused++;
      return Promise.reject(new EndpointError(429, `the rollout executor is over capacity (${this.queue.length} requests waiting); retry after a second`, { code: "over_capacity", retryAfter: 1 }));
    }
    const submitted = performance.now();
    return new Promise<RowResult>((resolve, reject) => {
      const w: Waiting = { req, resolve, reject, done: false, submitted };
      const fail = (e: Error): void => {
        if (w.done) return;
        w.done = true;
        clearTimeout(w.timer);
        const at = this.queue.indexOf(w);
        if (at >= 0) this.queue.splice(at, 1);
        reject(e);
      };
      w.timer = setTimeout(() => {
        this.stats.timedOut++;
        fail(new EndpointError(504, `the model did not answer within the request's deadline (${Math.round(req.deadline - submitted)} ms); raise the endpoint's request timeout, or ask for fewer tokens`, { code: "timeout" }));
      }, Math.max(0, req.deadline - performance.now()));
      req.signal?.addEventListener("abort", () => fail(new EndpointError(499, "the client closed the request", { code: "client_closed" })), { once: true });
      this.queue.push(w);
      this.kick();
    });
  }

  /** Gives back a delivered row's reference to its engine session (nothing will continue the row); the last one out releases it. */
  drop(session: number): void {
    const n = (this.refs.get(session) ?? 0) - 1;
    if (n > 0) {
      this.refs.set(session, n);
      return;
    }
    this.refs.delete(session);
    void this.engine.release(session).catch(() => undefined);
  }

  /** Engine sessions held for agent sessions now. */
  get sessionsHeld(): number {
    return this.refs.size;
  }

  /** Holds new batches (the executor is applying new weights; a batch already running finishes first, the engine serves in order), or lets them go. */
  hold(on: boolean): void {
    this.holding = on;
    if (!on) this.kick();
  }

  /** Requests waiting for a batch. */
  get waiting(): number {
    return this.queue.length;
  }

  private kick(): void {
    if (this.running || this.holding || this.queue.length === 0) return;
    // No open session (requests with the run's key only): nobody is expected, the window decides.
    const expected = this.o.expected?.() || Number.POSITIVE_INFINITY;
    if (this.queue.length >= Math.min(expected, this.maxRows) || this.windowMs <= 0) {
      clearTimeout(this.gather);
      // After this tick: rows submitted together (a request's n choices) go in one batch.
      this.gather = setTimeout(() => {
        this.gather = undefined;
        void this.runBatch();
      }, 0);
      return;
    }
    this.gather ??= setTimeout(() => {
      this.gather = undefined;
      void this.runBatch();
    }, this.windowMs);
  }

  private async runBatch(): Promise<void> {
    if (this.running || this.holding) return;
    const batch = this.queue.splice(0, this.maxRows).filter((w) => !w.done);
    if (batch.length === 0) return;
    this.running = true;
    try {
      await this.send(batch, false);
    } finally {
      this.running = false;
      this.kick();
    }
  }

  /** Runs `batch` on the engine; a source gone (no_session / stale_row) sends its rows again as whole sequences, once. */
  private async send(batch: Waiting[], retry: boolean): Promise<void> {
    const specs = batch.map((w) => {
      const spec = retry && w.req.spec.from ? { ...w.req.spec, from: undefined, tokens: [...w.req.whole!, ...w.req.spec.tokens] } : w.req.spec;
      return w.req.onToken ? { ...spec, stream: true } : spec;
    });
    // Streamed tokens go to their request while it still waits for them.
    const onTokens = batch.some((w) => w.req.onToken)
      ? (rows: number[], tokens: number[]): void => rows.forEach((r, i) => { const w = batch[r]; if (w && !w.done) w.req.onToken?.(tokens[i]!); })
      : undefined;
    let out: Awaited<ReturnType<BatchEngine["batch"]>>;
    const t0 = performance.now();
    try {
      out = await this.engine.batch(specs, this.o.eosIds, onTokens ? { onTokens } : undefined);
    } catch (err) {
      const gone = err instanceof EngineError && (err.code === "no_session" || err.code === "stale_row");
      if (gone && !retry && batch.some((w) => w.req.spec.from && w.req.whole)) {
        this.stats.retried++;
        return this.send(batch, true);
      }
      for (const w of batch) this.settle(w, undefined, err as Error);
      return;
    }
    this.stats.batches++;
    this.stats.rows += batch.length;
    this.record(specs, out.session, batch.map((w) => w.req.tag));
    // Each delivered row holds a reference (its receiver drops it); rows whose request gave up meanwhile hold none.
    const delivered = batch.filter((w) => !w.done).length;
    if (delivered === 0) {
      void this.engine.release(out.session).catch(() => undefined);
      return;
    }
    this.refs.set(out.session, delivered);
    const engineMs = performance.now() - t0;
    batch.forEach((w, i) => this.settle(w, { ...out.rows[i]!, session: out.session, row: i, queuedMs: t0 - w.submitted, engineMs }));
  }

  /** Delivers one row (true when its request was still waiting for it). */
  private settle(w: Waiting, result: RowResult | undefined, err?: Error): boolean {
    if (w.done) return false;
    w.done = true;
    clearTimeout(w.timer);
    if (result) w.resolve(result);
    else w.reject(err instanceof EndpointError ? err : new EndpointError(500, `the engine failed the batch: ${err?.message ?? "unknown"}`, { code: "engine_error", cause: err }));
    return result !== undefined;
  }

  /** Starts logging the engine batches (dropping any log before): what a replay of them needs. */
  startLog(): void {
    this.log = { entries: [], bySession: new Map() };
  }

  /** The batches logged since `startLog`, in order; logging stops. */
  takeLog(): LoggedBatch[] {
    const entries = this.log?.entries ?? [];
    this.log = undefined;
    return entries;
  }

  private record(specs: readonly BatchRowSpec[], session: number, tags: ReadonlyArray<string | undefined>): void {
    const log = this.log;
    if (!log) return;
    log.bySession.set(session, log.entries.length);
    log.entries.push({
      rows: specs.map(({ from, stream: _stream, tokens, ...rest }, i) => ({
        ...rest,
        tokens: [...tokens],
        ...(tags[i] !== undefined ? { tag: tags[i] } : {}),
        // A source outside the log (entry -1) cannot be replayed; the replay says so.
        ...(from ? { from: { entry: log.bySession.get(from.session) ?? -1, row: from.row, expect: from.expect } } : {}),
      })),
    });
  }

  /** Refuses new requests and fails those waiting. */
  close(): void {
    this.closed = true;
    clearTimeout(this.gather);
    for (const w of this.queue.splice(0)) this.settle(w, undefined, new EndpointError(503, "the endpoint is shutting down", { code: "shutting_down", retryAfter: 1 }));
  }
}
