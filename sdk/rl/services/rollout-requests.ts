/**
 * What the rollout service's agent and replay calls take and return: a lease
 * of episode sessions opened for agents elsewhere, an agent module's rollout,
 * a recorded call to replay, a what-if branch; and the sessions of a call's
 * items, seeded as the environment path's rows are.
 */
import type { ObjectRef } from "../../cache/object-cache.js";
import { deriveSeed } from "../../tensor/index.js";
import type { AgentSpec } from "../agent/agents.js";
import type { SessionEnd, SessionSpec } from "../agent/session.js";
import type { EpisodeLimits, RolloutItem, RolloutRequest } from "../types.js";
import type { LeaseOpened } from "./endpoint-host.js";
import type { AgentCallReplay, EnvCallReplay } from "./replay-host.js";

/** Default deadline of a lease of sessions opened for agents elsewhere. */
export const LEASE_MS = 10 * 60_000;
/** A lease run here outlives its agents' deadline by this much (closing it is the call's last step). */
export const LEASE_SLACK_MS = 30_000;

/** What an open lease records. */
export interface LeaseInfo {
  /** closeSessions is closing it (its record goes with the result). */
  closing?: boolean;
  version: number;
  refused: number;
  t0: number;
  keys?: string;
  /** What bringing the engine to the latest weights fetched before the lease opened, and how long it took (the step card's sync_bytes, sync_s). */
  syncBytes: number;
  syncSeconds: number;
}

/** `openSessions`: G sessions per item, seeded as the items' rollouts would be. */
export interface OpenSessionsRequest {
  setup: ObjectRef;
  weights: string;
  items: RolloutItem[];
  groupSize: number;
  /** Sampling of the sessions (temperature, top-p), and the seed of items without one (deriveSeed(seed, item, sample)). */
  limits: Pick<EpisodeLimits, "seed" | "temperature" | "topP">;
  /** The lease ends by itself after this long (default LEASE_MS). */
  leaseMs?: number;
  /** The key prefix of the trajectories object `closeSessions` stores. */
  keys?: string;
}

/** What `openSessions` returns: the lease, its sessions' keys and where to send requests. */
export interface OpenSessionsResult extends LeaseOpened {
  executorId: string;
  weightsVersion: number;
  syncBytes: number;
  syncSeconds: number;
}

/** `closeSessions`: the lease, and how its sessions ended (an answer, a reward, or an error). */
export interface CloseSessionsRequest {
  lease: string;
  ends: Array<{ id: string } & SessionEnd>;
  keys?: string;
}

/** `agentRollout`: a rollout call whose episodes an agent module runs here. */
export interface AgentRolloutRequest extends RolloutRequest {
  agent: AgentSpec;
  /** Bumped to import the agent's module afresh. */
  agentRevision?: number;
  agentTimeoutMs?: number;
}

/** `replay`: a recorded call, the version to run it at and where that version's publications are. */
export interface ReplayRequest {
  setup: ObjectRef;
  version: number;
  /** Weight chains to look for the version in (the live weights object, then kept history), newest first. */
  chains: string[];
  call: EnvCallReplay | AgentCallReplay;
  /** Each generated token's top-k alternatives (environment path: every row's; agent path: the sessions listed). */
  topK?: number;
  sessions?: string[];
  /** The key prefix of the output object (its owner deletes it). */
  keys?: string;
}

/** `branch`: an episode's tokens up to a point and what to continue it with. */
export interface BranchRequest {
  setup: ObjectRef;
  version: number;
  chains: string[];
  prompt: number[];
  /** The current turn's text already in `prompt` (what the environment reads the turn as begins with it). */
  turnPrefix?: string;
  seed?: number;
  limits: EpisodeLimits;
  item: { id: string; question: string };
  topK?: number;
  /** An agent session's reply (one generation, no environment) rather than an environment episode. */
  agent?: boolean;
}

/** The sessions of a call's items: G per item, each with its row seed (the same seeds as the environment path's rows). */
export function sessionSpecs(items: readonly RolloutItem[], groupSize: number, limits: Pick<EpisodeLimits, "seed" | "temperature" | "topP">): SessionSpec[] {
  const temperature = limits.temperature ?? 1;
  const topP = limits.topP ?? 1;
  return items.flatMap((item, i) =>
    Array.from({ length: groupSize }, (_, g) => ({ itemId: item.id, question: item.question, item: i, sample: g, seed: item.seed !== undefined ? deriveSeed(item.seed, g) : deriveSeed(limits.seed ?? 0, i, g), temperature, topP })),
  );
}
