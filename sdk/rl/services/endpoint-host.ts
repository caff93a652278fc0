/**
 * The agent endpoint as a rollout executor hosts it: started on first use
 * with the executor's engine, tokenizer and the run's endpoint settings
 * (started again when those change), it serves leases of episode sessions
 * (opened and closed by rollout calls), runs agent modules warm in this
 * process for the built-in step, and turns a closed lease's sessions into
 * the call's trajectories. While the executor applies new weights the
 * batcher holds its batches, so no request samples from half-applied ones.
 */
import { createHash } from "node:crypto";
import type { TensorEngine } from "../../tensor/index.js";
import { importServiceModule } from "../../runtime/import-module.js";
import { TemplateWorker } from "../text/chat-messages.js";
import type { TextTokenizer } from "../text/tokenizer.js";
import { AGENT_TIMEOUT_MS, agentItem, episodesOf, loadAgent, runAgents, type AgentFn, type AgentSpec } from "../agent/agents.js";
import { DecodeBatcher, type LoggedBatch } from "../agent/batcher.js";
import type { EpisodeLimitsOf } from "../agent/completions.js";
import { AgentEndpoint, type OpenedSession } from "../agent/endpoint.js";
import type { SessionEnd, SessionSpec } from "../agent/session.js";
import { toolParserFor } from "../agent/tool-parsers.js";
import type { AgentRolloutStats, Trajectory } from "../types.js";

/** The run's endpoint settings, shipped in the rollout setup. */
export interface EndpointSetup {
  /** The served model's name (the run's name). */
  model: string;
  /** sha256 (hex) of the run's key. */
  runKeyHash: string;
  /** Interface to bind (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: any free one). */
  port?: number;
  limits: Omit<EpisodeLimitsOf, "maxPositions">;
  /** Sessions sample with the agent's temperature and top-p instead of the run's. */
  honorAgent: boolean;
  /** Tool-call parser name (default "auto": from the chat template). */
  toolParser?: string;
  /** Gather window and widest batch of the shared decode. */
  batchWindowMs?: number;
  maxBatchRows?: number;
  /** Deadline of one request (default 120 s). */
  requestTimeoutMs?: number;
  /** Deadline of one agent episode run here (default AGENT_TIMEOUT_MS). */
  agentTimeoutMs?: number;
}

/** What the host needs of its executor. */
export interface HostParts {
  engine: TensorEngine;
  tokenizer: TextTokenizer;
  /** The model's context length (max_position_embeddings). */
  maxPositions: number;
}

/** What a lease's opener gets. */
export interface LeaseOpened {
  lease: string;
  baseURL: string;
  model: string;
  sessions: OpenedSession[];
}

/** Hosts the endpoint of one rollout executor (see the file's header). */
export class EndpointHost {
  private endpoint?: AgentEndpoint;
  private batcher?: DecodeBatcher;
  private key = "";
  private agents = new Map<string, AgentFn>();

  /** The endpoint for `setup` on `parts`, started (again) when either changed. */
  async ensure(setup: EndpointSetup, parts: HostParts): Promise<AgentEndpoint> {
    const key = createHash("sha256").update(JSON.stringify([setup, parts.maxPositions])).digest("hex");
    if (this.endpoint && key === this.key) return this.endpoint;
    await this.close();
    const batcher = new DecodeBatcher(parts.engine, { windowMs: setup.batchWindowMs, maxRows: setup.maxBatchRows, eosIds: parts.tokenizer.eosIds, expected: () => this.endpoint?.expected() ?? Number.POSITIVE_INFINITY });
    const ctx = {
      model: setup.model,
      tokenizer: parts.tokenizer,
      templates: new TemplateWorker(),
      parser: toolParserFor(parts.tokenizer.template?.source, setup.toolParser),
      batcher,
      limits: { ...setup.limits, maxPositions: parts.maxPositions },
      sampling: { honorAgent: setup.honorAgent },
      requestTimeoutMs: setup.requestTimeoutMs ?? 120_000,
    };
    this.endpoint = await AgentEndpoint.start(ctx, { host: setup.host, port: setup.port, runKeyHash: setup.runKeyHash });
    this.batcher = batcher;
    this.key = key;
    return this.endpoint;
  }

  /** The running endpoint (after `ensure`). */
  get current(): AgentEndpoint | undefined {
    return this.endpoint;
  }

  /** Holds (or lets go) the shared decode's batches: the executor is applying new weights. */
  hold(on: boolean): void {
    this.batcher?.hold(on);
  }

  /** Opens a lease of sessions on the running endpoint. */
  open(specs: readonly SessionSpec[], leaseMs: number, onClose?: () => void): LeaseOpened {
    const ep = this.endpoint!;
    // The lease's engine batches are logged: a replay runs them again, exactly.
    this.batcher?.startLog();
    const opened = ep.open(specs, { leaseMs, onClose });
    return { lease: opened.lease, baseURL: ep.baseURL, model: ep.model, sessions: opened.sessions };
  }

  /** Closes a lease; its sessions as trajectories and counters (undefined: no such open lease). */
  closeLease(lease: string, ends: ReadonlyMap<string, SessionEnd>, policyVersion: number, refusedBefore: number): { trajectories: Trajectory[]; stats: AgentRolloutStats; log: LoggedBatch[] } | undefined {
    const ep = this.endpoint;
    const sessions = ep?.close(lease, ends);
    if (!sessions) return undefined;
    return { ...episodesOf(sessions, policyVersion, ep!.counters.refused - refusedBefore), log: this.batcher?.takeLog() ?? [] };
  }

  /** Requests refused for capacity so far (a lease's count is the difference across it). */
  get refused(): number {
    return this.endpoint?.counters.refused ?? 0;
  }

  /** Runs agent `spec` on every session of an open lease, here, each within `timeoutMs`; returns each session's end. */
  async runAgents(spec: AgentSpec, revision: number, opened: LeaseOpened, items: ReadonlyMap<string, { id: string; question: string }>, timeoutMs = AGENT_TIMEOUT_MS): Promise<Map<string, SessionEnd>> {
    const fn = await this.agent(spec, revision);
    const ep = this.endpoint!;
    const sessions = opened.sessions.map((s) => ({ id: s.id, apiKey: s.apiKey, item: agentItem(items.get(s.id)!), label: `${s.itemId}#${s.sample}` }));
    return runAgents(fn, sessions, { baseURL: opened.baseURL, model: opened.model, timeoutMs }, (id, end) => ep.finish(id, end));
  }

  /** The agent function of `spec`, imported once per revision (a new revision reads the module afresh). */
  private async agent(spec: AgentSpec, revision: number): Promise<AgentFn> {
    const key = `${spec.module}#${spec.export}@${revision}`;
    let fn = this.agents.get(key);
    if (!fn) {
      fn = await loadAgent(spec, (m) => importServiceModule(m, { fresh: revision > 0 }));
      this.agents.clear();
      this.agents.set(key, fn);
    }
    return fn;
  }

  /** Stops the endpoint (its leases end). */
  async close(): Promise<void> {
    const ep = this.endpoint;
    this.endpoint = undefined;
    this.batcher = undefined;
    this.key = "";
    await ep?.shutdown();
  }
}
