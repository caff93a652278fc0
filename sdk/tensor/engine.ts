/**
 * `TensorEngine`: the TypeScript handle on one Python tensor engine process
 * (cluster-agent/engine), spoken to over its stdin/stdout with the framing in
 * frame.ts. Requests are served in order; each resolves with its typed result
 * or rejects with an `EngineError` (Python's code and traceback). If the
 * process dies, every pending and later request rejects with code
 * `engine_exited` and the tail of its stderr. Every request has a deadline
 * (default `DEFAULT_REQUEST_TIMEOUT_MS`): requests are served in order, so one
 * that overruns means the engine is wedged; it is killed, the request fails
 * with code `timeout`. The process also heartbeats on a pipe of its own
 * (fd 3, from a thread): silence past `hangTimeoutMs` means it is stopped or
 * frozen, so it is killed and everything pending fails with code `hung`. Both
 * are reported to this process's engine registry (liveness.ts), which the
 * executor host's heartbeats carry to the head: a gang whose rank lost its
 * engine fails naming the rank; a pool executor that lost its engine is
 * replaced, and the replacement's `init` starts a new engine.
 */

import { spawn, type ChildProcessByStdio } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { EngineError, type EngineErrorInfo } from "./errors.js";
import { FrameDecoder, decodeValue, encodeFrame, encodeValue } from "./frame.js";
import { findEngineDir, findPython } from "./python.js";
import { firstLine, processCpu, reportEngineChange, trackEngine, untrackEngine, type EngineLiveness, type EngineState } from "./liveness.js";
import { float32Tensor, int32Tensor, toFloat32Array, toInt32Array, uint8Tensor, type Tensor } from "./tensor.js";
import { checkSeeds, ragged, snake, unragged } from "./engine-codec.js";
import { engineEnv } from "./engine-env.js";
import type {
  ApplyResult, BatchedRow, BatchResult, BatchRowSpec, DistributedOptions, EngineInfo, GenerateResult, GeneratedRow, InitFolderOptions, InitFolderResult, InitModelOptions,
  InitModelResult, FilePublication, Publication, PublicationFile, PublicationSource, PublishedFile, SamplingOptions, TrainBatch, TrainMetrics, TrainerOptions,
} from "./types.js";

/** How to start an engine. */
export interface TensorEngineOptions {
  /** Interpreter (default: HEARTH_PYTHON, else the first of /usr/bin/python3, python3 that imports torch). */
  python?: string;
  /** Directory holding `hearth_engine` (default: HEARTH_ENGINE_DIR, else found from this module). */
  engineDir?: string;
  /** Extra environment for the process (e.g. CUDA_VISIBLE_DEVICES, HEARTH_THREADS). */
  env?: Record<string, string>;
  /** Called with each chunk the engine writes to stderr (default: kept, only the tail is reported). */
  onStderr?: (text: string) => void;
  /** Milliseconds to wait for the first ping (default 120 000). */
  startTimeoutMs?: number;
  /** Deadline of a request that gives none (default DEFAULT_REQUEST_TIMEOUT_MS; null: none). */
  requestTimeoutMs?: number | null;
  /**
   * Kill the engine as hung when its process sent no heartbeat for this long
   * (default DEFAULT_HANG_TIMEOUT_MS, or HEARTH_ENGINE_HANG_MS; null: never).
   * Armed once the engine answered its first ping (or beat), so a slow
   * `import torch` is not a hang.
   */
  hangTimeoutMs?: number | null;
}

/** How long an engine's process may go without a heartbeat before it counts as hung (its thread beats every 200 ms). */
export const DEFAULT_HANG_TIMEOUT_MS = 3_000;
/** How often the link looks at the time of the last heartbeat. */
export const HANG_POLL_MS = 250;
/** The engine's heartbeat pipe, as a file descriptor in its process. */
const BEAT_FD = 3;

/** Default request deadline: generous (a big generate or train step on CPU takes minutes), but finite. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30 * 60_000;

/** Per-request controls. */
export interface RequestOptions {
  /** Aborting rejects the request (code `aborted`); the engine still finishes it and its reply is dropped. */
  signal?: AbortSignal;
  /** Past this the engine is killed (it is wedged: later requests queue behind this one) and the request fails with code `timeout`; null: no deadline. */
  timeoutMs?: number | null;
  /** Events the engine sends while it serves this request (e.g. a publication's shard written), before its reply. */
  onEvent?: (event: Record<string, unknown>) => void;
}

interface Pending {
  op: string;
  resolve: (value: unknown) => void;
  reject: (error: EngineError) => void;
  onEvent?: (event: Record<string, unknown>) => void;
}

type EngineProcess = ChildProcessByStdio<Writable, Readable, Readable>;

function hangTimeoutFrom(option: number | null | undefined): number | null {
  if (option !== undefined) return option;
  const env = Number(process.env.HEARTH_ENGINE_HANG_MS);
  return Number.isFinite(env) && env > 0 ? env : DEFAULT_HANG_TIMEOUT_MS;
}

const STDERR_TAIL = 16 * 1024;

/** A running tensor engine process. Create with `TensorEngine.start()`; end with `close()`. */
export class TensorEngine {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly decoder = new FrameDecoder();
  private stderrTail = "";
  private failure: EngineError | undefined;
  private closing: Promise<void> | undefined;
  private readonly exited: Promise<void>;
  /** When the process last heartbeat; undefined until its first beat. */
  private lastBeat: number | undefined;
  private readonly startedAt = Date.now();
  private hangTimer: NodeJS.Timeout | undefined;
  private state: EngineState = "running";
  /** CPU ticks of the process when its silence was last looked at (a silent but busy process is not hung). */
  private silentCpu: number | undefined;

  private constructor(
    private readonly child: EngineProcess,
    private readonly onStderr?: (text: string) => void,
    private readonly requestTimeoutMs: number | null = DEFAULT_REQUEST_TIMEOUT_MS,
    private readonly hangTimeoutMs: number | null = DEFAULT_HANG_TIMEOUT_MS,
  ) {
    this.exited = new Promise((done) => child.once("close", () => done()));
  }

  /** Spawn the engine and wait until it answers a ping. */
  static async start(options: TensorEngineOptions = {}): Promise<TensorEngine> {
    const python = await findPython(options.python);
    const engineDir = findEngineDir(options.engineDir);
    // OpenBLAS keeps a thread pool of its own that torch.set_num_threads does not size: with
    // HEARTH_THREADS set, the BLAS gets the same count (else a 1-thread engine spins 2 cores).
    const threads = options.env?.HEARTH_THREADS ?? process.env.HEARTH_THREADS;
    const blas = threads && !process.env.OPENBLAS_NUM_THREADS ? { OPENBLAS_NUM_THREADS: threads } : {};
    const env = {
      ...engineEnv(process.env), ...blas, ...options.env, HEARTH_ENGINE_BEAT_FD: String(BEAT_FD),
      PYTHONPATH: [engineDir, process.env.PYTHONPATH].filter(Boolean).join(":"),
    };
    // fd 3 is the heartbeat pipe (a 4-tuple stdio has no typed overload).
    const child = spawn(python, ["-m", "hearth_engine"], { stdio: ["pipe", "pipe", "pipe", "pipe"], env }) as unknown as EngineProcess;
    const engine = new TensorEngine(child, options.onStderr, options.requestTimeoutMs === undefined ? DEFAULT_REQUEST_TIMEOUT_MS : options.requestTimeoutMs,
      hangTimeoutFrom(options.hangTimeoutMs));
    engine.attach();
    try {
      await engine.ping({ timeoutMs: options.startTimeoutMs ?? 120_000 });
    } catch (err) {
      await engine.close();
      throw err;
    }
    // Armed now at the latest: the first beat may still be on its way (the thread beats after its first sleep).
    engine.lastBeat ??= Date.now();
    trackEngine(engine);
    return engine;
  }

  /** How this engine is, for heartbeats (liveness.ts). */
  liveness(): EngineLiveness {
    const oldest = this.pending.values().next().value as Pending | undefined;
    return {
      pid: this.child.pid ?? null,
      state: this.state,
      silentMs: Date.now() - (this.lastBeat ?? this.startedAt),
      op: oldest?.op ?? null,
      detail: this.failure ? firstLine(this.failure.message) : null,
    };
  }

  /** The engine's process id. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** True until the process has exited or close() was called. */
  get alive(): boolean {
    return this.failure === undefined && this.closing === undefined;
  }

  private attach(): void {
    this.child.stdout.on("data", (chunk: Buffer) => this.onData(chunk));
    this.child.stderr.on("data", (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      this.stderrTail = (this.stderrTail + text).slice(-STDERR_TAIL);
      this.onStderr?.(text);
    });
    this.child.stdin.on("error", () => undefined); // EPIPE after death is reported through "close"
    const beats = (this.child.stdio as unknown[])[BEAT_FD] as Readable | undefined;
    beats?.on("data", () => (this.lastBeat = Date.now()));
    beats?.on("error", () => undefined);
    if (this.hangTimeoutMs !== null) {
      this.hangTimer = setInterval(() => this.checkHang(), HANG_POLL_MS);
      this.hangTimer.unref();
    }
    this.child.once("error", (err) => this.fail({ code: "spawn_failed", message: err.message }, err));
    this.child.once("close", (code, signal) => {
      const how = signal ? `signal ${signal}` : `exit code ${code}`;
      const tail = this.stderrTail.trim() ? `\n--- engine stderr (tail) ---\n${this.stderrTail.trimEnd()}` : "";
      this.fail({ code: this.closing ? "closed" : "engine_exited", message: `engine process ended with ${how}${tail}` });
    });
  }

  private onData(chunk: Buffer): void {
    this.decoder.push(chunk);
    for (;;) {
      let frame;
      try {
        frame = this.decoder.next();
      } catch (err) {
        this.fail({ code: "protocol", message: `unreadable reply: ${err instanceof EngineError ? err.message.replace(/^\[protocol\] /, "") : (err as Error).message}` }, err);
        this.child.kill("SIGKILL");
        return;
      }
      if (!frame) return;
      const id = frame.header.id as number;
      const entry = this.pending.get(id);
      if (!entry) continue; // a reply to a request that timed out or was aborted
      if (frame.header.event !== undefined) {
        // An event of a request still being served: its reply comes later.
        try {
          entry.onEvent?.(frame.header.event as Record<string, unknown>);
        } catch (err) {
          this.pending.delete(id);
          entry.reject(new EngineError({ code: "event_handler", message: `the handler of an event of '${entry.op}' threw: ${(err as Error).message}` }, { op: entry.op, cause: err }));
        }
        continue;
      }
      this.pending.delete(id);
      if (frame.header.ok !== true) {
        entry.reject(new EngineError(frame.header.error as EngineErrorInfo, { op: entry.op }));
        continue;
      }
      try {
        entry.resolve(decodeValue(frame.header.result, frame.payloads));
      } catch (err) {
        // A reply whose references do not fit its payloads: this request fails, the framing itself held.
        const message = err instanceof EngineError ? err.message.replace(/^\[protocol\] /, "") : String(err);
        entry.reject(new EngineError({ code: "protocol", message }, { op: entry.op, cause: err }));
      }
    }
  }

  /**
   * A process that stopped heartbeating is stopped or frozen: kill it rather
   * than wait for a request deadline. Where /proc can say, a silent process
   * that still uses CPU (a C call holding the GIL, CUDA initialising) or is
   * runnable (a loaded machine) is busy, not hung, and is left to its request
   * deadline; a stopped one (SIGSTOP) goes at once; a sleeping one that used
   * no CPU since the last look goes.
   */
  private checkHang(): void {
    if (this.failure || this.closing || this.lastBeat === undefined || this.hangTimeoutMs === null) return;
    const silent = Date.now() - this.lastBeat;
    if (silent <= this.hangTimeoutMs) {
      this.silentCpu = undefined;
      return;
    }
    const proc = this.child.pid === undefined ? undefined : processCpu(this.child.pid);
    let why = "its process is stopped or frozen";
    if (proc && proc.state !== "T" && proc.state !== "t") {
      // Runnable (R) waits for a CPU on a loaded machine; using CPU is work: neither is a hang.
      const busy = proc.state === "R" || this.silentCpu === undefined || proc.ticks > this.silentCpu;
      this.silentCpu = proc.ticks;
      if (busy) return;
      why = `its process is frozen (state ${proc.state}, no CPU used for ${HANG_POLL_MS} ms)`;
    } else if (proc) {
      why = "its process is stopped (SIGSTOP or a debugger)";
    }
    const doing = this.liveness().op;
    this.fail({
      code: "hung",
      message: `the engine (pid ${this.child.pid}) sent no heartbeat for ${silent} ms (limit ${this.hangTimeoutMs} ms)${doing ? ` while serving '${doing}'` : ""}: ` +
        `${why}, so it was killed; start a new one`,
    });
    this.child.kill("SIGKILL");
  }

  private fail(info: EngineErrorInfo, cause?: unknown): void {
    const first = this.failure === undefined;
    this.failure ??= new EngineError(info, { cause });
    clearInterval(this.hangTimer);
    if (first && !this.closing && info.code !== "closed") {
      this.state = info.code === "hung" ? "hung" : info.code === "timeout" ? "wedged" : "exited";
      // Before the pending requests reject: the executor's heartbeat then leaves before the calls' failures.
      reportEngineChange(this);
    }
    for (const [id, entry] of this.pending) {
      this.pending.delete(id);
      entry.reject(new EngineError(info, { op: entry.op, cause }));
    }
  }

  /**
   * Send one raw request (`op` and snake_case `args`; Tensors and Uint8Arrays
   * travel as binary payloads). The typed methods below are built on this.
   */
  request<T = unknown>(op: string, args: Record<string, unknown> = {}, options: RequestOptions = {}): Promise<T> {
    if (this.failure) return Promise.reject(new EngineError({ code: this.failure.code, message: this.failure.message }, { op }));
    if (this.closing) return Promise.reject(new EngineError({ code: "closed", message: "engine is closed" }, { op }));
    const id = this.nextId++;
    const payloads: Uint8Array[] = [];
    const encoded = encodeValue(args, payloads);
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (): void => finish(() => reject(new EngineError({ code: "aborted", message: "request aborted" }, { op })));
      const finish = (settle: () => void): void => {
        if (timer) clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        this.pending.delete(id);
        settle();
      };
      this.pending.set(id, {
        op,
        resolve: (v) => finish(() => resolve(v as T)),
        reject: (e) => finish(() => reject(e)),
        onEvent: options.onEvent,
      });
      if (options.signal?.aborted) return onAbort();
      options.signal?.addEventListener("abort", onAbort, { once: true });
      const timeoutMs = options.timeoutMs === undefined ? this.requestTimeoutMs : options.timeoutMs;
      if (timeoutMs !== null) {
        timer = setTimeout(() => {
          // Requests are served in order: an overdue one wedges every later one, so the engine goes.
          this.fail({ code: "timeout", message: `engine request '${op}' got no reply within ${timeoutMs} ms; the engine (pid ${this.child.pid}) was killed as wedged; start a new one` });
          this.child.kill("SIGKILL");
        }, timeoutMs);
      }
      for (const buf of encodeFrame({ id, op, args: encoded }, payloads)) this.child.stdin.write(buf);
    });
  }

  /** Engine version, torch version, pid, CUDA availability. */
  ping(options?: RequestOptions): Promise<EngineInfo> {
    return this.request("ping", {}, options);
  }

  /** Build (random init) or load the model; drops sessions, trainer and publication state. */
  initModel(model: InitModelOptions, options?: RequestOptions): Promise<InitModelResult> {
    return this.request("init_model", snake(model), options);
  }

  /** Send the vocabulary once: the UTF-8 bytes each token id decodes to (for stop strings). */
  async setVocab(pieces: readonly Uint8Array[], options?: RequestOptions): Promise<{ size: number }> {
    const offsets = new Int32Array(pieces.length + 1);
    pieces.forEach((p, i) => (offsets[i + 1] = offsets[i] + p.byteLength));
    return this.request("set_vocab", { data: Buffer.concat(pieces), offsets: int32Tensor(offsets) }, options);
  }

  /** Sample continuations of a batch of prompts; keeps a session for resume unless `keep` is false. */
  async generate(prompts: readonly (Int32Array | readonly number[])[], sampling: SamplingOptions = {},
    extra: { keep?: boolean; capacity?: number } & RequestOptions = {}): Promise<GenerateResult> {
    const { signal, timeoutMs, ...rest } = extra;
    checkSeeds(sampling, prompts.length, "generate");
    const result = await this.request<Record<string, unknown>>("generate",
      { ...ragged(prompts), params: snake(sampling), ...rest }, { signal, timeoutMs });
    return { session: result.session as number, rows: unragged(result) };
  }

  /**
   * Continue some rows of a session after appending tokens to each (e.g. a
   * search result); the cache is reused, only uncached tokens are computed.
   * Returns one entry per session row; rows not continued are `idle`.
   */
  async resume(session: number, appended: ReadonlyMap<number, Int32Array | readonly number[]>,
    sampling: SamplingOptions = {}, options?: RequestOptions): Promise<GeneratedRow[]> {
    checkSeeds(sampling, null, "resume"); // the session's row count is known to the engine, which checks it
    const rows = [...appended.keys()];
    const result = await this.request<Record<string, unknown>>("resume",
      { session, rows, ...ragged(rows.map((r) => appended.get(r) ?? [])), params: snake(sampling) }, options);
    return unragged(result);
  }

  /**
   * Samples rows from different requests in one batch (the agent endpoint's):
   * new prompts and continuations of kept sessions' rows, whose cached keys and
   * values are copied so only the appended tokens are computed. The new session
   * is kept (release it when no row of it will be continued). A row whose
   * source is gone fails the call with code `no_session` or `stale_row`: send
   * its whole sequence as a new row.
   */
  async batch(rows: readonly BatchRowSpec[], eosTokenIds: readonly number[], options?: RequestOptions & { cudaGraph?: boolean; onTokens?: (rows: number[], tokens: number[]) => void }): Promise<BatchResult> {
    const onTokens = options?.onTokens;
    const result = await this.request<Record<string, unknown>>("batch", {
      ...ragged(rows.map((r) => r.tokens)),
      sources: rows.map((r) => (r.from ? [r.from.session, r.from.row, r.from.expect] : null)),
      seeds: rows.map((r) => r.seed),
      max_new_tokens: rows.map((r) => r.maxNewTokens),
      temperature: rows.map((r) => r.temperature),
      top_p: rows.map((r) => r.topP),
      stop: rows.map((r) => [...(r.stop ?? [])]),
      top_logprobs: rows.map((r) => r.topLogprobs ?? 0),
      stream: rows.map((r) => r.stream === true),
      eos_token_ids: [...eosTokenIds],
      cuda_graph: options?.cudaGraph ?? true,
    }, { ...options, onEvent: onTokens ? (e) => { if (e.type === "tokens") onTokens(e.rows as number[], e.tokens as number[]); } : options?.onEvent });
    const digests = result.digests as string[];
    return { session: result.session as number, rows: unragged(result).map((r, i): BatchedRow => ({ ...r, digest: digests[i]! })) };
  }

  /** Free a session's KV cache. */
  release(session: number, options?: RequestOptions): Promise<{ released: boolean }> {
    return this.request("release", { session }, options);
  }

  /**
   * Teacher-forced top-k next tokens of `rows x cols` tokens from one forward:
   * at each position t (≥ 1), the k most likely tokens there and their
   * logprobs (row-major `rows × cols × k`; position 0 is zeros).
   */
  async topK(tokens: Int32Array, rows: number, cols: number, k: number, options?: RequestOptions): Promise<{ ids: Int32Array; logprobs: Float32Array }> {
    const r = await this.request<{ top_ids: Tensor; top_logprobs: Tensor }>("logprobs", { tokens: int32Tensor(tokens, [rows, cols]), top_k: k }, options);
    return { ids: toInt32Array(r.top_ids), logprobs: toFloat32Array(r.top_logprobs) };
  }

  /** Teacher-forced logprobs of `rows x cols` tokens, aligned with them (entry 0 of each row is 0). */
  async logprobs(tokens: Int32Array, rows: number, cols: number, options?: RequestOptions): Promise<Float32Array> {
    const result = await this.request<{ logprobs: Tensor }>("logprobs", { tokens: int32Tensor(tokens, [rows, cols]) }, options);
    return toFloat32Array(result.logprobs);
  }

  /** Make this engine a trainer (fp32 master weights, AdamW, frozen reference when klCoef > 0). */
  trainInit(config: TrainerOptions = {}, distributed?: DistributedOptions, options?: RequestOptions): Promise<{ config: Record<string, unknown>; backend: string | null }> {
    return this.request("train_init", { config: snake(config), distributed: distributed && snake(distributed) }, options);
  }

  /** One optimiser step on this rank's rows (every rank of a data-parallel group calls it together). */
  trainStep(batch: TrainBatch, options?: RequestOptions): Promise<TrainMetrics> {
    const shape = [batch.rows, batch.cols];
    const advShape = batch.advantages.length === batch.rows ? [batch.rows] : shape;
    return this.request("train_step", {
      tokens: int32Tensor(batch.tokens, shape),
      mask: uint8Tensor(batch.mask, shape),
      advantages: float32Tensor(batch.advantages, advShape),
      old_logprobs: batch.oldLogprobs && float32Tensor(batch.oldLogprobs, shape),
      ref_logprobs: batch.refLogprobs && float32Tensor(batch.refLogprobs, shape),
      local: batch.local === true,
    }, options);
  }

  /**
   * Publish bf16 weights: full shards the first time (or with `full`, a fresh
   * base), then one exact patch against the last publication. With
   * `version`, a fresh base numbered `version` (a publisher that goes on
   * where a lost one stopped).
   */
  publish(maxShardBytes?: number, options?: RequestOptions & { full?: boolean; version?: number }): Promise<Publication> {
    return this.request("publish", { max_shard_bytes: maxShardBytes, full: options?.full === true, version: options?.version }, options);
  }

  /**
   * Publish as `publish` does, but write each blob to a file in `outDir`
   * (streamed: no blob is whole in any process) and call `onFile` as each is
   * complete, so it can be shipped while the next is written. Without
   * `keepLast` a full publication keeps no bf16 copy (the next one is full).
   * A patch of at most `inlineMax` bytes comes back in the reply (`blob`).
   */
  publishFiles(outDir: string, options: RequestOptions & { maxShardBytes?: number; full?: boolean; version?: number; keepLast?: boolean; inlineMax?: number; onFile?: (f: PublishedFile) => void } = {}): Promise<FilePublication> {
    const { maxShardBytes, full, version, keepLast, inlineMax, onFile, ...rest } = options;
    return this.request("publish", { max_shard_bytes: maxShardBytes, full: full === true, version, out_dir: outDir, keep_last: keepLast !== false, inline_max: inlineMax ?? 0 }, {
      ...rest,
      onEvent: (e) => onFile?.({ path: String(e.file), size: Number(e.size), shard: Number(e.shard), version: Number(e.version), kind: e.kind === "patch" ? "patch" : "full" }),
    });
  }

  /** Apply publications held in files (a node cache's copy, read in place: the pipe carries only their paths), in order. */
  applyFiles(files: readonly PublicationFile[], options?: RequestOptions): Promise<ApplyResult> {
    return this.applySources(files, options);
  }

  /**
   * Apply publications, in order, each in memory (`data`) or in a file (a
   * node cache's copy, read in place), in one request: the engine checks
   * every blob's header and the whole chain of versions before it writes a
   * tensor, so a base and patches with one missing are refused whole.
   */
  applySources(sources: readonly PublicationSource[], options?: RequestOptions): Promise<ApplyResult> {
    return this.request("apply", {
      sources: sources.map((s) => ("data" in s ? { blob: s.data } : { path: s.path, offset: s.offset ?? 0, length: s.length ?? null })),
    }, options);
  }

  /**
   * A simulated optimizer step (benchmarks and tests): about `share` of every
   * tensor's bf16 values (`denseShare` of the tensor named `dense`) move by one
   * unit in the last place, as AdamW at small learning rates moves them.
   */
  perturb(step: { share: number; seed: number; dense?: string; denseShare?: number }, options?: RequestOptions): Promise<{ touched: number }> {
    return this.request("perturb", { share: step.share, seed: step.seed, dense: step.dense, dense_share: step.denseShare ?? 0.4 }, options);
  }

  /** Apply publications (full shards or patches, in order) to this engine's model; sessions are dropped. */
  apply(blobs: readonly Uint8Array[], options?: RequestOptions): Promise<ApplyResult> {
    return this.applySources(blobs.map((data) => ({ data })), options);
  }

  /** Write the model in HF layout (config.json + safetensors) under `path`. */
  saveCheckpoint(path: string, dtype: "bfloat16" | "float32" = "bfloat16", options?: RequestOptions): Promise<{ files: string[] }> {
    return this.request("save_checkpoint", { path, dtype }, options);
  }

  /** Write a random-weight HF folder (config.json + safetensors, sharded above maxShardBytes); needs no initModel. */
  async initFolder(folder: InitFolderOptions, options?: RequestOptions): Promise<InitFolderResult> {
    const r = await this.request<Record<string, unknown>>("init_folder", snake(folder), options);
    return { files: r.files as string[], totalSize: r.total_size as number, params: r.params as number,
      tensors: r.tensors as number, seconds: r.seconds as number };
  }

  /** sha256 of the trainer's exact state: fp32 master weights, and the AdamW moments and steps per parameter. */
  stateDigest(options?: RequestOptions): Promise<{ weights: string; moments: string; steps: number }> {
    return this.request("state_digest", {}, options);
  }

  /** sha256 of the model's bf16 weights: equal digests mean bit-identical policies. */
  digest(options?: RequestOptions): Promise<{ digest: string; tensors: number; version: number }> {
    return this.request("digest", {}, options);
  }

  /**
   * Write the trainer's exact state into the FOLDER `dir` (created if missing):
   * trainer-state.json (steps, GRPO config, AdamW hyperparameters),
   * master.safetensors (fp32 weights), reference.safetensors (when klCoef > 0)
   * and optimizer.safetensors (AdamW exp_avg, exp_avg_sq, step per tensor). No
   * pickle; the JSON is written last, so a folder holding it is complete.
   */
  saveState(dir: string, options?: RequestOptions): Promise<{ path: string; steps: number; bytes: number }> {
    return this.request("save_state", { path: dir }, options);
  }

  /**
   * Restore the folder `dir` written by saveState, bit for bit (call after
   * trainInit with the same model and config). A file path (e.g. an old pickled
   * trainer-state.pt) is refused with `bad_request`; nothing is unpickled.
   */
  loadState(dir: string, options?: RequestOptions): Promise<{ steps: number }> {
    return this.request("load_state", { path: dir }, options);
  }

  /**
   * Stop the engine: ask it to exit, wait up to `graceMs`, then kill it.
   * Pending requests reject with code `closed`. Safe to call repeatedly.
   */
  close(graceMs = 5_000): Promise<void> {
    untrackEngine(this);
    this.closing ??= (async () => {
      if (this.child.exitCode === null && this.child.signalCode === null && !this.failure) {
        for (const buf of encodeFrame({ id: 0, op: "shutdown", args: {} }, [])) this.child.stdin.write(buf);
        this.child.stdin.end();
        const timer = setTimeout(() => this.child.kill("SIGKILL"), graceMs);
        await this.exited;
        clearTimeout(timer);
      } else if (this.child.exitCode === null && this.child.signalCode === null) {
        this.child.kill("SIGKILL");
        await this.exited;
      }
      this.fail({ code: "closed", message: "engine is closed" });
    })();
    return this.closing;
  }
}
