/**
 * The rollout service (a pool): each executor keeps a tensor engine with the
 * policy, the tokenizer and the run's environment (built once here by its
 * `init`, so a tool's warm state, an index or a connection, never waits on
 * another service). Before each batch it brings its weights to the latest
 * publication by reading only what it has not applied, from its node's copy.
 * Calls on one executor run one after another (even with a service
 * concurrency above 1), so new weights arrive between calls, never in the
 * middle of a sample; every trajectory names the policy version it was
 * sampled with.
 */
import { createHash, randomUUID } from "node:crypto";
import type { ObjectRef } from "../../cache/object-cache.js";
import { importServiceModule } from "../../runtime/import-module.js";
import type { ExecutorContext } from "../../runtime/types.js";
import { TensorEngine, deriveSeed } from "../../tensor/index.js";
import { loadEnvironment, type Environment, type EnvironmentSpec } from "../environment.js";
import { runEpisodes, type EpisodeRow } from "../episodes.js";
import { EnvironmentError } from "../errors.js";
import { tokenizerFromFiles, type TextTokenizer, type TokenizerFiles } from "../text/tokenizer.js";
import type { ModelShape, RolloutRequest, RolloutResult, Trajectory } from "../types.js";
import { applyPublications, type PublicationRecord, type SyncResult } from "./weights.js";
import { AGENT_TIMEOUT_MS } from "../agent/agents.js";
import type { AgentEndpoint } from "../agent/endpoint.js";
import { EndpointError } from "../agent/endpoint-error.js";
import type { SessionEnd } from "../agent/session.js";
import { EndpointHost, type EndpointSetup } from "./endpoint-host.js";
import { LEASE_MS, LEASE_SLACK_MS, sessionSpecs, type AgentRolloutRequest, type BranchRequest, type CloseSessionsRequest, type LeaseInfo, type OpenSessionsRequest, type OpenSessionsResult, type ReplayRequest } from "./rollout-requests.js";
import { ReplayHost, type ReplayParts } from "./replay-host.js";
import type { Episode } from "../types.js";

export type { RolloutItem, RolloutRequest, RolloutResult, Trajectory } from "../types.js";
export type { EndpointSetup } from "./endpoint-host.js";
export { LEASE_MS, sessionSpecs, type AgentRolloutRequest, type BranchRequest, type CloseSessionsRequest, type OpenSessionsRequest, type OpenSessionsResult, type ReplayRequest } from "./rollout-requests.js";

/** Everything a rollout executor needs to set itself up; shipped once by reference. */
export interface RolloutSetup {
  /** The policy's shape; its weights come from the publication. */
  model: ModelShape;
  /** The tokenizer's raw files. */
  tokenizer: TokenizerFiles;
  /** The run's environment (its module and export) and its data for `init` (its recipe's); absent for a task trained only through the agent endpoint. */
  environment?: EnvironmentSpec;
  envData: unknown;
  /** The agent endpoint's settings (runs whose policy has a chat template): served from this executor on first use. */
  endpoint?: EndpointSetup;
  /** The longest a tool call may take before its sample fails. */
  toolTimeoutMs?: number;
  /** Bumped by `run.reloadEnvironment()`: the environment's module is imported afresh (the policy stays). */
  envRevision?: number;
  threads: number;
  /** Weights dtype: `auto` is bf16 on CUDA, fp32 on CPU. */
  dtype: "auto" | "bfloat16" | "float32";
}

/** The service class executors load. */
export class RolloutService {
  private ctx!: ExecutorContext;
  private engine?: TensorEngine;
  private setupKey = "";
  /** What the engine's model was set up from (a new setup with the same keeps the engine, its policy and weights). */
  private modelKey = "";
  private tokenizer!: TextTokenizer;
  private env?: Environment;
  private setup_?: RolloutSetup;
  /** The model's context length (from the engine's config). */
  private maxPositions = 0;
  private readonly host = new EndpointHost();
  private readonly replays = new ReplayHost();
  private toolTimeoutMs?: number;
  private weights: PublicationRecord = { version: 0 };
  private syncsToSkip = 0;
  /** The call running on this executor (or an open lease): the next one waits for it (weights change only between calls). */
  private turn: Promise<unknown> = Promise.resolve();
  /** Open leases of sessions opened by `openSessions`: the weights version they sample with, refusals before them, when they opened. */
  private readonly leases = new Map<string, LeaseInfo>();

  async init(ctx: ExecutorContext): Promise<void> {
    this.ctx = ctx;
  }

  private async setup(ref: ObjectRef): Promise<void> {
    const key = `${ref.key}@${ref.version}`;
    if (key === this.setupKey) return;
    const s = await this.ctx.objects.get<RolloutSetup>(ref);
    const modelKey = createHash("sha256").update(JSON.stringify([s.model, s.tokenizer, s.threads, s.dtype])).digest("hex");
    if (modelKey !== this.modelKey) {
      this.tokenizer = tokenizerFromFiles(s.tokenizer);
      // One engine per executor (its torch threads are fixed when it starts).
      this.engine ??= await this.startEngine({ HEARTH_THREADS: String(s.threads) });
      this.modelKey = "";
      const init = await this.engine.initModel({ config: s.model.config, overrides: s.model.overrides, seed: 0, threads: s.threads, dtype: s.dtype });
      this.maxPositions = Number(init.config.max_position_embeddings ?? 0) || 4096;
      await this.engine.setVocab(this.tokenizer.pieces());
      // A fresh model needs the full publication again.
      this.weights = { version: 0 };
      this.modelKey = modelKey;
    }
    // The environment's warm state, built once for this setup (a new setup builds it again; after the first, its module is read afresh: an edited tool).
    const fresh = this.env !== undefined;
    await this.env?.close?.();
    this.env = undefined;
    if (s.environment) {
      const spec = s.environment;
      const env = await loadEnvironment(spec, (m) => importServiceModule(m, { fresh }));
      try {
        await env.init?.({ executorId: this.ctx.executorId, objects: this.ctx.objects, data: s.envData });
      } catch (err) {
        throw new EnvironmentError(`environment '${env.name}' (${spec.module}#${spec.export}) failed to initialise on executor ${this.ctx.executorId}: ${(err as Error)?.message ?? String(err)}`, { environment: env.name, cause: err });
      }
      this.env = env;
    }
    this.toolTimeoutMs = s.toolTimeoutMs;
    this.setup_ = s;
    this.setupKey = key;
  }

  /** Generates `groupSize` episodes per item with the latest published weights. */
  async rollout(req: RolloutRequest): Promise<RolloutResult> {
    const run = this.turn.then(() => this.rolloutNow(req));
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** Starts a tensor engine (a subclass may give a stand-in, e.g. a simulated one for benchmarks). */
  protected startEngine(env: Record<string, string>): Promise<TensorEngine> {
    return TensorEngine.start({ env });
  }

  private async rolloutNow(req: RolloutRequest): Promise<RolloutResult> {
    const tCall = performance.now();
    await this.setup(req.setup);
    const t0 = performance.now();
    let syncBytes = 0;
    if (this.syncsToSkip > 0) this.syncsToSkip--;
    else syncBytes = (await this.syncWeights(req.weights)).bytes;
    const syncSeconds = (performance.now() - t0) / 1000;
    const env = this.env;
    if (!env) throw new EnvironmentError("this run's task has no environment class: its rollouts go through the agent endpoint (give the run an agent)", { environment: "none" });
    const rows: EpisodeRow[] = [];
    const seeds: number[] = [];
    for (const item of req.items) {
      let ids: number[] | undefined;
      for (let g = 0; g < req.groupSize; g++) {
        const start = env.reset({ id: item.id, question: item.question, golds: [] });
        // Every sample of an item has the same prompt (the environment's state is the sample's own).
        ids ??= this.tokenizer.encode(this.tokenizer.chat(start.system, start.user));
        rows.push({ prompt: ids, state: start.state, label: `${item.id}#${g}` });
        if (item.seed !== undefined) seeds.push(deriveSeed(item.seed, g));
      }
    }
    const limits = seeds.length === rows.length ? { ...req.limits, seeds } : req.limits;
    const t1 = performance.now();
    const episodes = await runEpisodes(this.engine!, this.tokenizer, env, rows, { ...limits, toolTimeoutMs: this.toolTimeoutMs });
    const policyVersion = this.weights.version;
    const { seeds: _seeds, ...limitsOnly } = limits as typeof limits & { seeds?: number[] };
    const call = { id: randomUUID(), rows: rows.length, limits: limitsOnly, envRevision: this.setup_?.envRevision ?? 0 };
    const trajectories: Trajectory[] = episodes.map((e, i) => ({
      itemId: req.items[Math.floor(i / req.groupSize)]!.id,
      group: Math.floor(i / req.groupSize),
      ...e,
      policyVersion,
      ...(seeds.length === rows.length ? { seed: seeds[i] } : {}),
      row: i,
      call,
    }));
    // Scratch: if the driver that owns it vanishes, the head deletes it with the app.
    const ref = await this.ctx.objects.put(trajectories, { key: req.keys === undefined ? undefined : `${req.keys}traj-${randomUUID()}`, scratch: true });
    return {
      trajectories: ref,
      weightsVersion: this.weights.version,
      executorId: this.ctx.executorId,
      syncBytes,
      syncSeconds,
      generateSeconds: (performance.now() - t1) / 1000,
      busySeconds: (performance.now() - tCall) / 1000,
      tokens: episodes.reduce((n, e) => n + e.tokens.length, 0),
    };
  }

  /**
   * Brings this executor's policy to the latest publication of `weights`
   * (what every rollout call does first) without generating, in turn with
   * its calls: so that a check can then compare every executor's digest
   * with the trainers'. Returns the version held and the bytes fetched.
   */
  async sync(setup: ObjectRef, weights: string): Promise<{ executorId: string; version: number; bytes: number }> {
    const run = this.turn.then(async () => {
      await this.setup(setup);
      const r = await this.syncWeights(weights);
      return { executorId: this.ctx.executorId, version: this.weights.version, bytes: r.bytes };
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** Applies what was published since the version held; a sync that failed midway leaves the engine holding no known version (the next applies the base whole). */
  private async syncWeights(weights: string): Promise<SyncResult> {
    // The endpoint's batches wait while weights change (requests outside any lease could arrive now).
    this.host.hold(true);
    try {
      const r = await applyPublications(this.ctx.objects, weights, this.engine!, this.weights);
      this.weights = { version: r.version, cache: r.cache };
      return r;
    } catch (err) {
      this.weights = { version: 0 };
      throw err;
    } finally {
      this.host.hold(false);
    }
  }

  // ── the agent endpoint ──────────────────────────────────────────────

  /** The endpoint of this run's setup, started on first use. */
  private async endpoint(setup: ObjectRef): Promise<AgentEndpoint> {
    await this.setup(setup);
    const e = this.setup_?.endpoint;
    if (!e) throw new EndpointError(400, "this run serves no agent endpoint: its policy's tokenizer has no chat template", { code: "no_endpoint" });
    return this.host.ensure(e, { engine: this.engine!, tokenizer: this.tokenizer, maxPositions: this.maxPositions });
  }

  /** Percentiles of the endpoint's completions' times on this executor (ms): its own overhead, waiting for a batch, the batch; `clear` starts afresh. */
  async endpointTimings(clear = false): Promise<{ executorId: string; timings: ReturnType<AgentEndpoint["timings"]["summary"]> | null }> {
    return { executorId: this.ctx.executorId, timings: this.host.current?.timings.summary(clear) ?? null };
  }

  /**
   * Where this executor serves the endpoint (started if need be) and the
   * model's name; requests there with the run's key are recorded nowhere.
   * With `weights`, the engine is brought to that publication first, in this
   * executor's turn (after the call or lease before it), so the run's key is
   * served the policy as it now stands, never the engine's initial weights.
   */
  async endpointInfo(setup: ObjectRef, weights?: string): Promise<{ executorId: string; baseURL: string; model: string; weightsVersion: number }> {
    const info = this.turn.then(async () => {
      const ep = await this.endpoint(setup);
      if (weights !== undefined) await this.syncWeights(weights);
      return { executorId: this.ctx.executorId, baseURL: ep.baseURL, model: ep.model, weightsVersion: this.weights.version };
    });
    this.turn = info.catch(() => undefined);
    return info;
  }

  /**
   * Opens `groupSize` episode sessions per item (a lease) with the latest
   * published weights, for agents that run elsewhere (a notebook cell, any
   * process): returns their keys and the endpoint's address. The lease holds
   * this executor's turn (no weights change under it) until `closeSessions`
   * or its deadline, `leaseMs`.
   */
  async openSessions(req: OpenSessionsRequest): Promise<OpenSessionsResult> {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const opened = this.turn.then(async () => {
      const { syncBytes, syncSeconds } = await this.prepareLease(req.setup, req.weights);
      const specs = sessionSpecs(req.items, req.groupSize, req.limits);
      const lease = this.host.open(specs, req.leaseMs ?? LEASE_MS, () => {
        // Closed by closeSessions, by its deadline or with the endpoint: the next call may run.
        release();
        if (!this.leases.get(lease.lease)?.closing) this.leases.delete(lease.lease);
      });
      this.leases.set(lease.lease, { version: this.weights.version, refused: this.host.refused, t0: performance.now(), keys: req.keys, syncBytes, syncSeconds });
      return { ...lease, executorId: this.ctx.executorId, weightsVersion: this.weights.version, syncBytes, syncSeconds };
    });
    this.turn = opened.then(() => held, () => undefined);
    return opened;
  }

  /** Closes a lease: unfinished sessions end with the given ends (or fail); its trajectories go to the cache, as a rollout call's do. */
  async closeSessions(req: CloseSessionsRequest): Promise<RolloutResult> {
    const info = this.leases.get(req.lease);
    if (!info) throw new EndpointError(404, `no open lease ${req.lease} on executor ${this.ctx.executorId}: it was closed already or its deadline passed`, { code: "lease_not_found" });
    info.closing = true;
    this.leases.delete(req.lease);
    const ends = new Map(req.ends.map(({ id, ...end }) => [id, end]));
    return this.leaseResult(req.lease, ends, info, req.keys ?? info.keys);
  }

  /**
   * The built-in step of an agent run: `groupSize` sessions per item, each
   * run by the agent module `req.agent` here, warm beside the model, against
   * this executor's endpoint; their episodes come back as trajectories.
   */
  async agentRollout(req: AgentRolloutRequest): Promise<RolloutResult> {
    const run = this.turn.then(async () => {
      const tCall = performance.now();
      const { syncBytes, syncSeconds } = await this.prepareLease(req.setup, req.weights);
      const specs = sessionSpecs(req.items, req.groupSize, req.limits);
      const t0 = performance.now();
      const opened = this.host.open(specs, (req.agentTimeoutMs ?? AGENT_TIMEOUT_MS) + LEASE_SLACK_MS);
      const info = { version: this.weights.version, refused: this.host.refused, t0, keys: req.keys, syncBytes, syncSeconds };
      const items = new Map(opened.sessions.map((s) => [s.id, req.items[s.item]!]));
      const ends = await this.host.runAgents(req.agent, req.agentRevision ?? 0, opened, items, req.agentTimeoutMs ?? this.setup_?.endpoint?.agentTimeoutMs);
      const r = await this.leaseResult(opened.lease, ends, info, req.keys);
      return { ...r, busySeconds: (performance.now() - tCall) / 1000 };
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** Set up, endpoint started, weights brought to the latest publication: what opening a lease needs. */
  private async prepareLease(setup: ObjectRef, weights: string): Promise<{ syncBytes: number; syncSeconds: number }> {
    await this.endpoint(setup);
    const t0 = performance.now();
    let syncBytes = 0;
    if (this.syncsToSkip > 0) this.syncsToSkip--;
    else syncBytes = (await this.syncWeights(weights)).bytes;
    return { syncBytes, syncSeconds: (performance.now() - t0) / 1000 };
  }

  /** Closes a lease and stores its trajectories (a scratch object under `keys`, as a rollout call's). */
  private async leaseResult(lease: string, ends: ReadonlyMap<string, SessionEnd>, info: LeaseInfo, keys?: string): Promise<RolloutResult> {
    const closed = this.host.closeLease(lease, ends, info.version, info.refused);
    if (!closed) throw new EndpointError(404, `no open lease ${lease} on executor ${this.ctx.executorId}`, { code: "lease_not_found" });
    // The lease's engine batches, for a replay: an object beside the trajectories (their owner deletes both).
    const log = closed.log.length > 0 ? await this.ctx.objects.put(closed.log, { key: keys === undefined ? undefined : `${keys}log-${randomUUID()}`, scratch: true }) : undefined;
    const call = { id: lease, rows: closed.stats.sessions, ...(log ? { log } : {}) };
    for (const t of closed.trajectories) t.call = call;
    const ref = await this.ctx.objects.put(closed.trajectories, { key: keys === undefined ? undefined : `${keys}traj-${randomUUID()}`, scratch: true });
    const seconds = (performance.now() - info.t0) / 1000;
    return {
      trajectories: ref,
      weightsVersion: info.version,
      executorId: this.ctx.executorId,
      syncBytes: info.syncBytes,
      syncSeconds: info.syncSeconds,
      generateSeconds: seconds,
      busySeconds: seconds,
      tokens: closed.trajectories.reduce((n, t) => n + t.tokens.length, 0),
      agent: closed.stats,
    };
  }

  /**
   * Fault injection for the live agreement checks: the next `n` rollout calls
   * on this executor skip the weight sync and sample with the weights it holds.
   */
  async skipSyncs(n: number): Promise<{ executorId: string; skipping: number }> {
    if (!Number.isInteger(n) || n < 0) throw new RangeError(`skipSyncs needs a whole number ≥ 0; got ${String(n)}`);
    this.syncsToSkip = n;
    return { executorId: this.ctx.executorId, skipping: n };
  }

  /**
   * One turn of this executor's environment, outside any episode: the
   * observation it answers a turn `text` that stopped at `stop` with (what
   * a tool would insert), for checks that every member's tool works.
   */
  async tool(setup: ObjectRef, question: string, text: string, stop: string): Promise<{ executorId: string; step: unknown }> {
    await this.setup(setup);
    const env = this.env!;
    const start = env.reset({ id: "tool-check", question, golds: [] });
    return { executorId: this.ctx.executorId, step: await env.step(start.state, { text, stop, callsLeft: 1 }) };
  }

  // ── replays ─────────────────────────────────────────────────────────

  /** The parts of this executor's setup a replay engine needs. */
  private replayParts(): ReplayParts {
    const s = this.setup_!;
    return { model: s.model, threads: s.threads, dtype: s.dtype, tokenizer: this.tokenizer, objects: this.ctx.objects };
  }

  /**
   * Runs a recorded rollout call again on this executor's replay engine at
   * the policy version it was sampled with (replay-host.ts), in turn with
   * its calls; the output goes to the cache (a scratch object under `keys`).
   */
  async replay(req: ReplayRequest): Promise<{ executorId: string; output: ObjectRef; seconds: number; loadSeconds: number }> {
    const run = this.turn.then(async () => {
      await this.setup(req.setup);
      const src = { version: req.version, chains: req.chains };
      const out = req.call.kind === "env"
        ? await this.replays.replayEnv(this.replayParts(), src, req.call, this.needEnv(), { topK: req.topK, toolTimeoutMs: this.toolTimeoutMs })
        : await this.replays.replayAgent(this.replayParts(), src, req.call, { topK: req.topK, sessions: req.sessions });
      const ref = await this.ctx.objects.put(out, { key: req.keys === undefined ? undefined : `${req.keys}replay-${randomUUID()}`, scratch: true });
      return { executorId: this.ctx.executorId, output: ref, seconds: out.seconds, loadSeconds: out.loadSeconds };
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** A what-if branch: continues an episode's tokens up to a point (with what was forced) under a version, with its seed (replay-host.ts). */
  async branch(req: BranchRequest): Promise<{ executorId: string; episode: Episode }> {
    const run = this.turn.then(async () => {
      await this.setup(req.setup);
      const env = req.agent ? undefined : this.needEnv();
      const episode = await this.replays.branch(this.replayParts(), { version: req.version, chains: req.chains }, { ...req, toolTimeoutMs: this.toolTimeoutMs }, env);
      return { executorId: this.ctx.executorId, episode };
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  /** Teacher-forced logprobs of `tokens` under a version (for comparing versions on one episode). */
  async scoreTokens(setup: ObjectRef, version: number, chains: string[], tokens: number[]): Promise<{ executorId: string; logprobs: Float32Array }> {
    const run = this.turn.then(async () => {
      await this.setup(setup);
      return { executorId: this.ctx.executorId, logprobs: await this.replays.score(this.replayParts(), { version, chains }, tokens) };
    });
    this.turn = run.catch(() => undefined);
    return run;
  }

  private needEnv(): Environment {
    if (!this.env) throw new EnvironmentError("this run's task has no environment class to replay its episodes with", { environment: "none" });
    return this.env;
  }

  /** sha256 of the policy's bf16 weights and the publication version it holds. */
  async digest(): Promise<{ digest: string | null; version: number; executorId: string }> {
    // An executor that never took a rollout holds no policy yet.
    const d = this.engine && this.setupKey !== "" ? (await this.engine.digest()).digest : null;
    return { digest: d, version: this.weights.version, executorId: this.ctx.executorId };
  }

  async close(): Promise<void> {
    await this.host.close();
    await this.replays.close();
    await this.env?.close?.();
    await this.engine?.close();
  }
}
