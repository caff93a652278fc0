/**
 * Rollouts through the agent endpoint, from the driver's side. Three ways,
 * one result (the trajectories of G episode sessions per item, seeded as the
 * environment path's rows are, in the same `RolloutParts` the pipeline
 * scores and trains):
 *
 * - the built-in step (`--agent FILE#EXPORT`): `agentRollout` calls, each
 *   running the agent module warm on its rollout executor;
 * - a notebook cell's own agent function: `EpisodeSessions.run(fn)`;
 * - any other process, in any language: the sessions' `baseURL` and
 *   `apiKey`, then `finish(id, …)` here or `POST /hearth/v1/session/finish`
 *   there, then `collect()`.
 *
 * The run's endpoint key is derived from the app's credential (every driver
 * of the app derives the same; the executors keep only its sha256).
 */
import { createHash } from "node:crypto";
import type { App } from "../../runtime/app.js";
import { deriveSeed } from "../../tensor/seeds.js";
import { AGENT_TIMEOUT_MS, agentItem, parseAgentSpec, runAgents, type AgentFn } from "../agent/agents.js";
import type { SessionEnd } from "../agent/session.js";
import type { EndpointSetup } from "../services/endpoint-host.js";
import type { OpenSessionsResult } from "../services/rollout-service.js";
import type { RolloutItem, TaskItem } from "../types.js";
import { RunError } from "../errors.js";
import type { RunOptions } from "./options.js";
import { limitsOf, type RolloutParts, type StepServices } from "./step-services.js";

/** The run's endpoint key (`hk_…`): derived from the app's credential and the run's name. */
export function runEndpointKey(app: App, run: string): string {
  return `hk_${app.derivedKey(`agent-endpoint:${run}`).slice(0, 48)}`;
}

/** The endpoint settings a run's rollout setup carries (its policy has a chat template). */
export function endpointSetup(app: App, o: RunOptions): EndpointSetup {
  return {
    model: o.name,
    runKeyHash: createHash("sha256").update(runEndpointKey(app, o.name)).digest("hex"),
    host: o.endpointHost,
    limits: { maxTurnTokens: o.maxTurnTokens, maxResponseTokens: o.maxResponseTokens, maxToolCalls: o.maxToolCalls },
    honorAgent: o.agentSampling === "agent",
    toolParser: o.toolParser,
    batchWindowMs: o.batchWindowMs,
    maxBatchRows: o.maxBatchRows,
    requestTimeoutMs: o.endpointTimeoutMs,
    agentTimeoutMs: o.agentTimeoutMs,
  };
}

/** The call items of `items` at step `step` (their row seeds, as the environment path's). */
function callItems(o: RunOptions, items: readonly TaskItem[], step: number, offset: number): RolloutItem[] {
  return items.map((x, j) => ({ id: x.id, question: x.question, seed: deriveSeed(o.seed, step, offset + j) }));
}

/**
 * The built-in step's rollouts of an agent run: `promptsPerTask` items per
 * `agentRollout` call, the agent module running beside the model.
 */
export async function agentRollouts(svc: StepServices, agent: string, items: readonly TaskItem[], groupSize: number, temperature: number, step: number, keys?: string, revision = 0): Promise<RolloutParts> {
  const per = svc.opts.promptsPerTask;
  const chunks: TaskItem[][] = [];
  for (let i = 0; i < items.length; i += per) chunks.push(items.slice(i, i + per));
  const spec = parseAgentSpec(agent);
  return Promise.all(
    chunks.map(async (q, i) => {
      const r = await svc.rollout.call("agentRollout", {
        setup: svc.rolloutSetup, weights: svc.weightsKey, items: callItems(svc.opts, q, step, i * per), groupSize, limits: limitsOf(svc.opts, temperature, step * 1000 + i), keys,
        agent: spec, agentRevision: revision, agentTimeoutMs: svc.opts.agentTimeoutMs,
      });
      return { q, r };
    }),
  );
}

/** One session of a batch of episode sessions, as an agent elsewhere gets it. */
export interface EpisodeSessionInfo {
  id: string;
  /** Its endpoint (the rollout executor holding its tokens) and key. */
  baseURL: string;
  apiKey: string;
  model: string;
  item: TaskItem;
  /** Which of the item's G samples. */
  sample: number;
}

/**
 * Episode sessions opened for agents that run elsewhere (see the file's
 * header): leases on the rollout executors, each holding its executor's
 * weights until collected (or until its deadline).
 */
export class EpisodeSessions {
  private readonly ends = new Map<string, SessionEnd>();
  private collected = false;

  constructor(
    private readonly svc: StepServices,
    private readonly leases: Array<{ executorId: string; q: TaskItem[]; opened: OpenSessionsResult }>,
    readonly keys: string | undefined,
  ) {}

  /** Every session, item by item. */
  get sessions(): EpisodeSessionInfo[] {
    return this.leases.flatMap(({ q, opened }) => opened.sessions.map((s) => ({ id: s.id, baseURL: opened.baseURL, apiKey: s.apiKey, model: opened.model, item: q[s.item]!, sample: s.sample })));
  }

  /** Records how a session ended (its agent's answer, or a reward, or an error); `collect` sends it. */
  finish(id: string, end: SessionEnd): void {
    if (!this.sessions.some((s) => s.id === id)) throw new RangeError(`no session ${id} in this batch`);
    this.ends.set(id, end);
  }

  /** Runs `agent` on every session here (in this process), all at once, each within `timeoutMs`; records each ending. */
  async run(agent: AgentFn, o: { timeoutMs?: number } = {}): Promise<void> {
    const timeoutMs = o.timeoutMs ?? this.svc.opts.agentTimeoutMs ?? AGENT_TIMEOUT_MS;
    await Promise.all(
      this.leases.map(({ q, opened }) =>
        runAgents(agent, opened.sessions.map((s) => ({ id: s.id, apiKey: s.apiKey, item: agentItem(q[s.item]!), label: `${s.itemId}#${s.sample}` })), { baseURL: opened.baseURL, model: opened.model, timeoutMs }, (id, end) => this.ends.set(id, end)),
      ),
    );
  }

  /**
   * Closes every lease: sessions not finished here end as their agent posted
   * (`/hearth/v1/session/finish`) or else fail; their trajectories are the
   * batch `run.score` takes.
   */
  async collect(): Promise<RolloutParts> {
    if (this.collected) throw new RunError("these sessions were collected already", { run: this.svc.opts.name });
    this.collected = true;
    return Promise.all(
      this.leases.map(async ({ executorId, q, opened }) => {
        const ends = opened.sessions.filter((s) => this.ends.has(s.id)).map((s) => ({ id: s.id, ...this.ends.get(s.id)! }));
        const r = await this.svc.rollout.callMember(executorId, "closeSessions", { lease: opened.lease, ends, keys: this.keys });
        return { q, r };
      }),
    );
  }
}

/**
 * Opens `groupSize` sessions per item, the items spread over the rollout
 * executors (one lease each), seeded as step `step`'s rows.
 */
export async function openEpisodeSessions(svc: StepServices, items: readonly TaskItem[], o: { groupSize: number; temperature: number; step: number; keys?: string; leaseMs?: number }): Promise<EpisodeSessions> {
  const members = await svc.rollout.members();
  if (members.length === 0) throw new RunError("the run has no rollout executor to open sessions on", { run: svc.opts.name });
  const shares: TaskItem[][] = members.map(() => []);
  const offsets: number[][] = members.map(() => []);
  items.forEach((x, i) => {
    shares[i % members.length]!.push(x);
    offsets[i % members.length]!.push(i);
  });
  const leases = await Promise.all(
    members.map(async (m, k) => {
      const q = shares[k]!;
      if (q.length === 0) return undefined;
      const callItems_ = q.map((x, j) => ({ id: x.id, question: x.question, seed: deriveSeed(svc.opts.seed, o.step, offsets[k]![j]!) }));
      const opened = await svc.rollout.callMember(m.executorId, "openSessions", { setup: svc.rolloutSetup, weights: svc.weightsKey, items: callItems_, groupSize: o.groupSize, limits: limitsOf(svc.opts, o.temperature, o.step * 1000 + k), leaseMs: o.leaseMs, keys: o.keys });
      return { executorId: m.executorId, q, opened };
    }),
  );
  return new EpisodeSessions(svc, leases.filter((l): l is NonNullable<typeof l> => l !== undefined), o.keys);
}

/** Where each rollout executor serves the endpoint (each addressed by id), its engine brought to the latest published weights. */
export async function endpointURLs(svc: StepServices): Promise<Array<{ executorId: string; baseURL: string; model: string; weightsVersion: number }>> {
  return (await svc.rollout.broadcastMembers("endpointInfo", svc.rolloutSetup, svc.weightsKey)).map((m) => m.result);
}

/**
 * A run's agent endpoint as its driver sees it (`run.endpoint`): the model's
 * name, the run's key (requests with it are served, recorded nowhere), each
 * rollout executor's address, and episode sessions to open for agents that
 * run in this process or elsewhere.
 */
export class RunEndpoint {
  constructor(
    private readonly svc: () => StepServices,
    /** The run's key (`Authorization: Bearer …`). */
    readonly apiKey: string,
  ) {}

  /** The served model's name (the run's). */
  get model(): string {
    return this.svc().opts.name;
  }

  /** The endpoint of every rollout executor (started where it was not), each serving the latest published weights (the version it holds). */
  urls(): Promise<Array<{ executorId: string; baseURL: string; model: string; weightsVersion: number }>> {
    return endpointURLs(this.svc());
  }

  /** One executor's address, for a quick request with the run's key. */
  async baseURL(): Promise<string> {
    return (await this.urls())[0]!.baseURL;
  }

  /**
   * Opens `groupSize` (default the run's) episode sessions per item, seeded
   * as step `step`'s (default the next) rows: run an agent on them here
   * (`.run(fn)`), or hand each `baseURL` and `apiKey` to a process of any
   * language, then `.collect()` (a batch for `run.score`).
   */
  open(items: readonly TaskItem[], o: { groupSize?: number; temperature?: number; step: number; keys: string; leaseMs?: number }): Promise<EpisodeSessions> {
    const svc = this.svc();
    return openEpisodeSessions(svc, items, { groupSize: o.groupSize ?? svc.opts.groupSize, temperature: o.temperature ?? svc.opts.temperature, step: o.step, keys: o.keys, leaseMs: o.leaseMs });
  }
}
