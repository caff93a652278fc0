/**
 * What a step's pipeline runs on (the run's app, options, task, services and
 * setup), the shape of a batch's rollout calls, and the limits its rollouts
 * use: the floor both pipeline.ts and agent-rollouts.ts stand on.
 */
import type { ObjectRef } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle, PoolHandle } from "../../runtime/handles.js";
import type { RolloutService } from "../services/rollout-service.js";
import type { TrainerService } from "../services/trainer-service.js";
import type { EpisodeLimits, RolloutResult, TaskItem } from "../types.js";
import type { RunOptions } from "./options.js";
import type { RolloutsAhead } from "./overlap.js";
import type { PreparedTask } from "./recipe.js";
import type { AgentFn } from "../agent/agents.js";
import type { WeightHistory } from "../replay/history.js";

/** What the pipeline runs on. */
export interface StepServices {
  app: App;
  opts: RunOptions;
  task: PreparedTask;
  rollout: PoolHandle<RolloutService>;
  trainer: GangHandle<TrainerService>;
  rolloutSetup: ObjectRef;
  weightsKey: string;
  /** The rollouts started ahead of their steps and the trainers' policy version. */
  ahead: RolloutsAhead<RolloutParts>;
  /** The RL updates the trainers have taken in this run (every trainOn that trained). */
  updates: number;
  /** Bumped by `run.reloadAgent()`: the rollout executors import the agent's module afresh. */
  agentRevision?: number;
  /** The policy versions kept for replays beyond the live weights object (`--replay-versions`). */
  history?: WeightHistory;
  /** An agent function the driver runs itself (`run.setAgent(fn)`), against the executors' endpoint: the episodes of every rollout. */
  agentFn?: AgentFn;
}

/** The rollout calls of one batch of task items (each call's items, and what it returned). */
export type RolloutParts = Array<{ q: TaskItem[]; r: RolloutResult }>;

/** The layer's limits a run's rollouts use, at `temperature` with batch seed `seed`. */
export function limitsOf(o: RunOptions, temperature: number, seed: number): EpisodeLimits {
  return { maxToolCalls: o.maxToolCalls, maxTurnTokens: o.maxTurnTokens, maxResponseTokens: o.maxResponseTokens, temperature, seed };
}

