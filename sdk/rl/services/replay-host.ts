/**
 * Replays on a rollout executor. A second tensor engine, started on first
 * use with the rollout engine's model, threads and dtype (so it computes as
 * that engine did, bit for bit), loads an earlier policy version from the
 * publications the run keeps (the live weights object, then kept history)
 * and runs a recorded rollout call again exactly as it ran: the
 * environment path's whole batch (its rows, seeds and limits, with the
 * observations as recorded or the tools run again), or an agent lease's
 * engine batches from its log. Rows of one batch are not independent to the
 * last bit (padding and blocking change with the batch), so a replay runs
 * the whole call: then every token and logprob is the original's, and any
 * difference is real. It also continues an episode from any point (a
 * what-if branch) and scores tokens under a version (teacher-forced
 * logprobs). The live engine is never touched: training does not slow
 * unless a replay runs.
 */
import { open } from "node:fs/promises";
import { HearthError } from "../../errors/index.js";
import type { ObjectCache, ObjectRef } from "../../cache/object-cache.js";
import { TensorEngine, type TokenAlternatives } from "../../tensor/index.js";
import type { LoggedBatch } from "../agent/batcher.js";
import type { Environment, EnvStep } from "../environment.js";
import { runEpisodes, type EpisodeRow } from "../episodes.js";
import type { TextTokenizer } from "../text/tokenizer.js";
import type { Episode, EpisodeLimits, ModelShape } from "../types.js";

/** A policy version the run no longer keeps: what it keeps, and how to keep more. */
export class VersionNotKeptError extends HearthError {
  override name = "VersionNotKeptError";
  declare readonly version: number;
  constructor(message: string, fields: { version: number }) {
    super(message, undefined, { version: fields.version });
  }
}

/** Where a version's publications may be: cache keys of weight chains (a base and its patches), newest first. */
export interface VersionSource {
  version: number;
  chains: string[];
}

/** An environment-path call to replay: its rows as recorded, and its limits. */
export interface EnvCallReplay {
  kind: "env";
  rows: Array<{
    prompt: number[];
    seed?: number;
    label: string;
    /** The observations inserted after each generated turn, as recorded (ids). */
    observations: number[][];
    item: { id: string; question: string };
  }>;
  limits: EpisodeLimits;
  /** Run the tools again (the environment as this executor holds it now: a reloaded one) instead of inserting what was recorded. */
  live?: boolean;
}

/** An agent lease to replay: its engine batches, in order. */
export interface AgentCallReplay {
  kind: "agent";
  log: ObjectRef;
}

/** A replayed environment-path row: its episode (tokens, mask, logprobs, alternatives of the rows asked for). */
export type ReplayedEpisode = Episode;

/** A replayed agent session: its completions in order (each one request's sampled ids). */
export interface ReplayedCompletion {
  tokens: number[];
  logprobs: number[];
  alternatives?: TokenAlternatives[];
}

/** What a replay produced. */
export interface ReplayOutput {
  version: number;
  /** Environment path: every row of the call. */
  episodes?: ReplayedEpisode[];
  /** Agent path: per session id, its completions. */
  sessions?: Record<string, ReplayedCompletion[]>;
  seconds: number;
  /** Seconds spent bringing the replay engine to the version. */
  loadSeconds: number;
}

/** What the host needs of its executor: the model and tokenizer its rollout engine was set up with. */
export interface ReplayParts {
  model: ModelShape;
  threads: number;
  dtype: "auto" | "bfloat16" | "float32";
  tokenizer: TextTokenizer;
  objects: ObjectCache;
}

/** Inserts each row's recorded observations in order, then ends its episode (the original's stop strings). */
class RecordedEnvironment implements Environment<{ obs: number[][]; k: number }> {
  readonly name = "recorded";
  constructor(readonly stops: readonly string[]) {}
  reset(): never {
    throw new HearthError("a recorded environment is given its rows' states");
  }
  step(state: { obs: number[][]; k: number }): EnvStep {
    const ids = state.obs[state.k++];
    return ids === undefined ? { done: true } : { observation: "", ids };
  }
}

/** The replay engine of one rollout executor (see the file's header). */
export class ReplayHost {
  private engine?: TensorEngine;
  private modelKey = "";
  /** The version the replay engine holds, and the chain and cache version it was read from. */
  private held?: { version: number; chain: string; cacheVersion: number; baseVersion: number };

  /** The replay engine, started (or set up again) for `parts`' model. */
  private async engineFor(parts: ReplayParts): Promise<TensorEngine> {
    const key = JSON.stringify([parts.model, parts.threads, parts.dtype]);
    if (this.engine && key === this.modelKey) return this.engine;
    this.engine ??= await TensorEngine.start({ env: { HEARTH_THREADS: String(parts.threads) } });
    await this.engine.initModel({ config: parts.model.config, overrides: parts.model.overrides, seed: 0, threads: parts.threads, dtype: parts.dtype });
    await this.engine.setVocab(parts.tokenizer.pieces());
    this.modelKey = key;
    this.held = undefined;
    return this.engine;
  }

  /** Brings the replay engine to `src.version`, from the first chain that holds it; returns the seconds it took. */
  async load(parts: ReplayParts, src: VersionSource): Promise<{ engine: TensorEngine; seconds: number }> {
    const t0 = performance.now();
    const engine = await this.engineFor(parts);
    if (this.held?.version === src.version) return { engine, seconds: 0 };
    const kept: string[] = [];
    for (const chain of src.chains) {
      const r = await parts.objects.getParts(chain, { full: true }).catch((err: Error) => {
        if (err.name === "ObjectNotFoundError") return undefined;
        throw err;
      });
      if (!r || r.mode === "not-modified") continue;
      // Each part is a self-describing publication blob: its version says where it belongs without applying it.
      const metas = await Promise.all(r.parts.map(publicationOf));
      const first = metas.find((m) => m.format === "hearth-full")?.version ?? NaN;
      const last = Math.max(...metas.map((m) => m.version));
      kept.push(`${first}–${last}`);
      if (!(first <= src.version && src.version <= last)) continue;
      this.held = undefined;
      let version = 0;
      for (const [i, p] of r.parts.entries()) {
        if (metas[i]!.version > src.version) break;
        version = (await apply(engine, p)).version;
      }
      if (version === src.version) {
        this.held = { version, chain, cacheVersion: r.version, baseVersion: r.baseVersion };
        return { engine, seconds: (performance.now() - t0) / 1000 };
      }
    }
    throw new VersionNotKeptError(
      `policy version ${src.version} is not kept: the run keeps versions ${kept.join(", ") || "none"}. Keep more with the run option --replay-versions N (replayVersions; each version kept costs one patch in the cache, and a base every --rebase-every versions)`,
      { version: src.version },
    );
  }

  /** Runs an environment-path call again (every row, as it ran); `topK` adds alternatives to the rows listed. */
  async replayEnv(parts: ReplayParts, src: VersionSource, call: EnvCallReplay, env: Environment, o: { topK?: number; toolTimeoutMs?: number }): Promise<ReplayOutput> {
    const { engine, seconds: loadSeconds } = await this.load(parts, src);
    const t0 = performance.now();
    const used: Environment = call.live ? env : new RecordedEnvironment(env.stops);
    const rows: EpisodeRow[] = call.rows.map((r) => ({ prompt: r.prompt, label: r.label, state: call.live ? env.reset({ ...r.item, golds: [] }).state : { obs: r.observations, k: 0 } }));
    const seeds = call.rows.every((r) => r.seed !== undefined) ? { seeds: call.rows.map((r) => r.seed!) } : {};
    const episodes = await runEpisodes(engine, parts.tokenizer, used, rows, { ...call.limits, ...seeds, toolTimeoutMs: o.toolTimeoutMs, topLogprobs: o.topK });
    return { version: src.version, episodes, seconds: (performance.now() - t0) / 1000, loadSeconds };
  }

  /** Runs an agent lease's engine batches again, in order; each tagged row's completion goes to its session. */
  async replayAgent(parts: ReplayParts, src: VersionSource, call: AgentCallReplay, o: { topK?: number; sessions?: readonly string[] }): Promise<ReplayOutput> {
    const { engine, seconds: loadSeconds } = await this.load(parts, src);
    const t0 = performance.now();
    const log = await parts.objects.get<LoggedBatch[]>(call.log);
    // An entry's engine session is released after the last entry that continues one of its rows.
    const lastUse = log.map((_, e) => e);
    log.forEach((entry, e) => entry.rows.forEach((r) => r.from && (lastUse[r.from.entry] = Math.max(lastUse[r.from.entry]!, e))));
    const sessionOf: number[] = [];
    const sessions: Record<string, ReplayedCompletion[]> = {};
    const detail = new Set(o.sessions ?? []);
    try {
      for (const [e, entry] of log.entries()) {
        const rows = entry.rows.map((r) => {
          if (r.from && (r.from.entry < 0 || sessionOf[r.from.entry] === undefined)) throw new HearthError(`the log's batch ${e} continues a row the log does not hold: this lease cannot be replayed`);
          const { from, tag, ...rest } = r;
          return { ...rest, ...(from ? { from: { session: sessionOf[from.entry]!, row: from.row, expect: from.expect } } : {}), topLogprobs: tag !== undefined && detail.has(tag) ? (o.topK ?? 0) : 0 };
        });
        const out = await engine.batch(rows, parts.tokenizer.eosIds);
        sessionOf[e] = out.session;
        entry.rows.forEach((r, i) => {
          if (r.tag === undefined) return;
          const row = out.rows[i]!;
          (sessions[r.tag] ??= []).push({ tokens: [...row.tokens], logprobs: [...row.logprobs], ...(row.alternatives ? { alternatives: row.alternatives } : {}) });
        });
        for (let k = 0; k <= e; k++) if (lastUse[k] === e && sessionOf[k] !== undefined) await engine.release(sessionOf[k]!);
      }
    } finally {
      for (const s of sessionOf) if (s !== undefined) await engine.release(s).catch(() => undefined);
    }
    return { version: src.version, sessions, seconds: (performance.now() - t0) / 1000, loadSeconds };
  }

  /**
   * A what-if: continues `prompt` (an episode's tokens up to a point, with
   * what was forced or replaced) under the version, with the row's seed,
   * the environment running any tool call it makes (environment path), or
   * for one reply (agent sessions, `env` undefined: until an end of turn).
   */
  async branch(parts: ReplayParts, src: VersionSource, b: { prompt: number[]; turnPrefix?: string; seed?: number; limits: EpisodeLimits; item: { id: string; question: string }; topK?: number; toolTimeoutMs?: number }, env: Environment | undefined): Promise<Episode> {
    const { engine } = await this.load(parts, src);
    const seeds = b.seed !== undefined ? { seeds: [b.seed] } : {};
    if (env) {
      const [ep] = await runEpisodes(engine, parts.tokenizer, env, [{ prompt: b.prompt, label: `${b.item.id}#branch`, state: env.reset({ ...b.item, golds: [] }).state, turnPrefix: b.turnPrefix }], { ...b.limits, ...seeds, toolTimeoutMs: b.toolTimeoutMs, topLogprobs: b.topK });
      return ep!;
    }
    const one = await engine.generate([b.prompt], { temperature: b.limits.temperature ?? 1, topP: b.limits.topP ?? 1, maxNewTokens: b.limits.maxTurnTokens ?? 64, eosTokenIds: parts.tokenizer.eosIds, ...seeds, ...(b.topK ? { topLogprobs: b.topK } : {}) }, { keep: false });
    const row = one.rows[0]!;
    const tokens = [...b.prompt, ...row.tokens];
    return {
      promptLength: b.prompt.length,
      tokens: Int32Array.from(tokens),
      mask: Uint8Array.from(tokens.map((_, i) => (i < b.prompt.length ? 0 : 1))),
      logprobs: Float32Array.from([...b.prompt.map(() => 0), ...row.logprobs]),
      response: parts.tokenizer.decode(row.tokens),
      calls: [],
      finish: row.finishReason === "eos" ? "eos" : row.finishReason === "stop" ? "answer" : "length",
      ...(row.alternatives ? { alternatives: row.alternatives } : {}),
    };
  }

  /** Teacher-forced logprobs of `tokens` under the version (entry 0 is 0): how likely that version finds each token. */
  async score(parts: ReplayParts, src: VersionSource, tokens: readonly number[]): Promise<Float32Array> {
    const { engine } = await this.load(parts, src);
    return engine.logprobs(Int32Array.from(tokens), 1, tokens.length);
  }

  async close(): Promise<void> {
    await this.engine?.close();
    this.engine = undefined;
  }
}

/** A publication blob's metadata (safetensors `__metadata__`): its format (hearth-full or hearth-patch) and version. */
async function publicationOf(part: { file?: string; data?: Buffer; ready?: () => Promise<void> }): Promise<{ format: string; version: number }> {
  await part.ready?.();
  let head: Buffer;
  if (part.data) head = part.data;
  else {
    const fd = await open(part.file!, "r");
    try {
      const len = Buffer.alloc(8);
      await fd.read(len, 0, 8, 0);
      const n = Number(len.readBigUInt64LE(0));
      if (n > 100 * 1024 * 1024) throw new HearthError(`${part.file}: not a publication (a safetensors header of ${n} bytes)`);
      head = Buffer.alloc(8 + n);
      await fd.read(head, 0, 8 + n, 0);
    } finally {
      await fd.close();
    }
  }
  const n = Number(head.readBigUInt64LE(0));
  const meta = (JSON.parse(head.subarray(8, 8 + n).toString("utf8")) as { __metadata__?: Record<string, string> }).__metadata__ ?? {};
  return { format: meta.format ?? "", version: Number(meta.version ?? NaN) };
}

async function apply(engine: TensorEngine, part: { file?: string; data?: Buffer; ready?: () => Promise<void> }): Promise<{ version: number }> {
  await part.ready?.();
  return engine.applySources([part.file ? { path: part.file } : { data: part.data! }]);
}
