/**
 * The types the RL layer's floors share: what a task item, an episode, a
 * trajectory, a scored sample, a rollout call, a training slice and a step's
 * metrics are. The bottom of `sdk/rl`: it imports nothing of the layer, so
 * every other file may import it without a circle.
 */
import type { ObjectRef } from "../cache/object-cache.js";
import type { FilePublication, TokenAlternatives, TrainMetrics } from "../tensor/types.js";

/** One task item: what the policy is asked, and the answers that count as right. */
export interface TaskItem {
  id: string;
  question: string;
  golds: string[];
  /**
   * The item's category in evaluation breakdowns (held-out EM is also
   * reported per category): a task's own grouping, e.g. the chain task's
   * number of searches ("2 hops"), the calculator's number of calls.
   */
  category?: string;
}

/** A supervised demonstration (a warm start's): tokens, and 1 where they are trained on. */
export interface Demo {
  tokens: number[];
  mask: number[];
}

/** Scores one response against its golden answers; higher is better, usually in [0, 1]. */
export type RewardFn = (response: string, golds: string[]) => number;

/** The policy's shape for the engine: a preset name or an HF config dict, plus overrides. */
export interface ModelShape {
  config: string | Record<string, unknown>;
  overrides?: Record<string, unknown>;
}

/** How an environment names its tool calls in metrics, logs, reports and views. */
export interface EnvWords {
  /** One call, as a noun ("search", "calculation"). */
  call: string;
  /** Calls, as a plural noun and the metrics' field stem (`<calls>_per_sample`, `eval_<calls>`): "searches", "calls". */
  calls: string;
  /** The inserted observation, as a noun ("retrieved passage", "result"). */
  observation: string;
}

/** The layer's limits and sampling of one batch of episodes; the environment's own settings travel with it apart. */
export interface EpisodeLimits {
  /** Tool calls allowed per sample (default 4). */
  maxToolCalls?: number;
  /** Tokens one generation turn may produce (default 64). */
  maxTurnTokens?: number;
  /** Tokens of the whole response, inserted text included (default 320). */
  maxResponseTokens?: number;
  /** 0 = greedy. Default 1. */
  temperature?: number;
  topP?: number;
  /** One seed for the batch (ignored when `seeds` is given). */
  seed?: number;
  /**
   * One seed per row (see deriveSeed): each row then samples from its own
   * stream, so its tokens do not depend on which other rows share its batch,
   * which executor ran it, or when.
   */
  seeds?: number[];
}

/** One finished episode. */
export interface Episode {
  promptLength: number;
  /** Prompt + response tokens. */
  tokens: Int32Array;
  /** 1 where the policy generated the token; 0 for the prompt and every inserted observation. */
  mask: Uint8Array;
  /** Rollout logprob of each generated token (0 elsewhere). */
  logprobs: Float32Array;
  /** The response as text (generated and inserted). */
  response: string;
  /** The tool calls the environment ran, in order (what it reported for each). */
  calls: string[];
  /** How it ended: the environment said done, a limit cut it, an end-of-turn token, or the environment failed on it. */
  finish: "answer" | "length" | "eos" | "error";
  /** With finish "error": what failed (the environment's error, naming it, the sample and the call). */
  error?: string;
  /** Replays that asked for them: each generated token's top-k alternatives and entropy, in order. */
  alternatives?: TokenAlternatives[];
}

/** A run of sampled ids in a sequence: where, how many, and the engine's sha256 of them (int32 little-endian). */
export interface SampledRun {
  at: number;
  n: number;
  digest: string;
}

/** What a trajectory records of its rollout call, for a replay (see Trajectory.call). */
export interface CallRecord {
  id: string;
  /** Rows of the call (the environment path's batch; the agent lease's sessions). */
  rows: number;
  /** The environment path: the call's limits and sampling (row seeds are on each trajectory). */
  limits?: Omit<EpisodeLimits, "seeds">;
  /** The environment revision its environment was loaded at (`reloadEnvironment`). */
  envRevision?: number;
  /** Agent sessions: the engine batches the endpoint ran for the lease, in order (an object of the step's). */
  log?: ObjectRef;
}

/** A chat message as an agent episode's transcript keeps it. */
export interface TranscriptMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string;
  tool_calls?: Array<{ id?: string; type: "function"; function: { name: string; arguments: Record<string, unknown> } }>;
  tool_call_id?: string;
}

/** What an agent episode's session counted (on the episode's first sequence). */
export interface AgentEpisodeStats {
  requests: number;
  toolCalls: number;
  /** Tool calls that looked like calls but did not parse, with the first's reason and text. */
  parseFailures: number;
  firstParseFailure?: { reason: string; text: string };
  prefixMismatches: number;
  /** Requests answered with no tokens because a limit was reached. */
  lengthCuts: number;
}

/** One trajectory as stored in the cache. */
export interface Trajectory extends Episode {
  itemId: string;
  group: number;
  /** The publication version of the weights that sampled it (the trainers' version then). */
  policyVersion: number;
  /** Its row seed (per-row sampling; absent when its call sampled from one batch seed) and its row in its rollout call. */
  seed?: number;
  row?: number;
  /**
   * The rollout call it came from, as a replay rebuilds it: the call's id and
   * rows, its limits (environment path) or the log of the engine batches
   * its endpoint ran (agent sessions).
   */
  call?: CallRecord;
  /**
   * Agent episodes (the endpoint's sessions): the session, and which of its
   * sequences this is. A rendered prompt that did not extend the session's
   * tokens split the episode into several sequences; they share the
   * episode's reward and advantage and each trains on its own tokens.
   */
  episode?: { session: string; sample: number; sequence: number; sequences: number };
  /** The agent's final answer (agent episodes): what the reward scores instead of `response`. */
  final?: string;
  /** A reward the agent gave (returned or posted): used instead of the run's reward function. */
  agentReward?: number;
  /** Agent episodes: where the sampled ids are and the engine's digest of each run (the trainer checks them). */
  sampled?: SampledRun[];
  /** Agent episodes: the conversation as the agent last sent it, and the reply. */
  messages?: TranscriptMessage[];
  /** Agent episodes: the session's counters (on the first sequence). */
  agentStats?: AgentEpisodeStats;
}

/** One task item to roll out. */
export interface RolloutItem {
  id: string;
  question: string;
  /** Seeds the item's samples (sample g gets deriveSeed(seed, g)); absent: the call's batch seed. */
  seed?: number;
}

/** A rollout call. */
export interface RolloutRequest {
  setup: ObjectRef;
  /** The weights object (full shards, then appended patches). */
  weights: string;
  items: RolloutItem[];
  groupSize: number;
  limits: EpisodeLimits;
  /**
   * The key prefix of the call's trajectories object (a fresh key under it
   * per call): its owner (a step, an evaluation) deletes everything under
   * the prefix, the objects of calls retried after an executor died
   * included. Absent: a key of the cache's choosing.
   */
  keys?: string;
}

/** What a rollout call returns (the trajectories travel by reference). */
export interface RolloutResult {
  trajectories: ObjectRef;
  weightsVersion: number;
  executorId: string;
  /** Weight bytes this call applied (0 when already current). */
  syncBytes: number;
  syncSeconds: number;
  generateSeconds: number;
  /** Seconds this executor spent on the call (waiting for an earlier call on it excluded). */
  busySeconds: number;
  tokens: number;
  /** Agent episodes: what the endpoint counted for this call's sessions. */
  agent?: AgentRolloutStats;
}

/** What the endpoint counted over one rollout call's sessions (summed into a step's metrics). */
export interface AgentRolloutStats {
  sessions: number;
  requests: number;
  toolCalls: number;
  parseFailures: number;
  prefixMismatches: number;
  /** Requests refused for capacity (429) while the call ran. */
  refused: number;
  lengthCuts: number;
  sessionsWithoutCalls: number;
  /** Sessions that failed (the agent threw, returned nothing usable, or ran past its deadline). */
  failed: number;
  /** A sample to look at for each counter that is not 0: its label (item#group) and what happened. */
  examples: Record<string, { sample: string; text: string }>;
}

/** A scored sample: a trajectory with its reward and (if kept) advantage. */
export interface ScoredSample extends Trajectory {
  question: string;
  golds: string[];
  /** The answer the environment reads in the response (null: none). */
  answer: string | null;
  reward: number;
  advantage: number;
  kept: boolean;
}

/** Scored samples and the group statistics of one batch. */
export interface Scored {
  samples: ScoredSample[];
  groupsKept: number;
  groupsDropped: number;
}

/** A training batch slice as stored in the cache (row-major `rows × cols`). */
export interface TrainSlice {
  rows: number;
  cols: number;
  tokens: Int32Array;
  mask: Uint8Array;
  /** One advantage per row (GRPO); ignored by `sft`. */
  advantages: Float32Array;
  oldLogprobs: Float32Array;
  /**
   * Per row, where its sampled ids are and the engine's digest of each run
   * (agent episodes; null for a row without them): the trainer checks that
   * the ids it trains on are the ids that were sampled.
   */
  sampled?: Array<SampledRun[] | null>;
  /** Per row, the sample it is (item#sample), for errors. */
  labels?: string[];
}

/** What one publication wrote. */
export type PublishStats = Omit<FilePublication, "files"> & { cacheVersion: number; rebased: boolean };

/** What a trainer's `train` returns: the step's metrics, and on rank 0 (when it published) the publication's stats. */
export interface TrainResult {
  rank: number;
  metrics: TrainMetrics;
  publish?: PublishStats;
  /** Seconds rank 0 spent publishing (part of `seconds`); absent on other ranks and when nothing was published. */
  publishSeconds?: number;
  seconds: number;
}

/**
 * One step's metrics (the metrics.jsonl fields). The tool-call counts are
 * named by the environment (EnvWords.calls): Search-R1 writes
 * `searches_per_sample` and `eval_searches`; read them with `callsOf`.
 */
export interface StepMetrics {
  step: number;
  reward_mean: number;
  em: number;
  groups_kept: number;
  groups_dropped: number;
  samples_trained: number;
  tokens: number;
  rollout_s: number;
  update_s: number;
  publish_bytes: number;
  /** Seconds rank 0 spent publishing the new weights (part of update_s). */
  publish_s?: number;
  step_s: number;
  weights_version: number;
  /** Weight bytes the rollouts fetched for this step, and how many executors fetched any. */
  sync_bytes: number;
  sync_executors: number;
  /** Longest time one rollout call spent fetching and applying new weights (part of its rollout). */
  sync_s?: number;
  /** Live agreement checks from the trainers (absent when no sample was trained on): mean and max |sampler − trainer| logprob on generated tokens. */
  logprob_gap?: number;
  logprob_gap_max?: number;
  /** k3 KL to the frozen reference, per generated token. */
  kl?: number;
  /** Policy ratio π/π_old: mean and max over generated tokens; share of tokens clipped. */
  ratio_mean?: number;
  ratio_max?: number;
  clip_frac?: number;
  /** Policy entropy on generated tokens. */
  entropy?: number;
  loss?: number;
  grad_norm?: number;
  eval_em?: number;
  /** Held-out EM per task item category (TaskItem.category: the chain task's hop count), on evaluation steps of tasks whose items have one. */
  eval_em_by?: Record<string, number>;
  /* The overlap fields below are written by every step; optional only because a history from before them lacks them. */
  /** The lag allowed (--max-lag), and the trainers' policy version this step trained from. */
  max_lag?: number;
  policy_version?: number;
  /** How many versions the trained trajectories lag behind it: max and mean (0 when in sync). */
  policy_lag_max?: number;
  policy_lag_mean?: number;
  /** Trajectories dropped for lagging more than max_lag versions (only with max_lag ≥ 1). */
  stale_dropped?: number;
  /** Samples the environment failed on this step (absent when none did). */
  env_errors?: number;
  /** Share of the step's groups whose samples all had the same reward (dropped: they teach nothing). */
  zero_variance_share?: number;
  /**
   * Agent runs (the endpoint's counters, alarms.ts): sessions, requests, tool
   * calls parsed, tool calls that did not parse, prompts that did not extend
   * the sampled tokens, requests refused for capacity, requests cut by a
   * limit, sessions that never called a tool, episodes that failed.
   */
  agent_sessions?: number;
  agent_requests?: number;
  agent_tool_calls?: number;
  tool_parse_failures?: number;
  prefix_mismatches?: number;
  refused_requests?: number;
  length_cuts?: number;
  sessions_without_calls?: number;
  agent_failures?: number;
  /** Executor-seconds the rollout calls of this step's trajectories took, and the trainers' train calls (summed over ranks). */
  rollout_busy_s?: number;
  trainer_busy_s?: number;
  /** Busy seconds over step_s × executors (rollouts; trainers): the share of the step each kind worked. */
  rollout_util?: number;
  trainer_util?: number;
  /** The environment's fields: `<calls>_per_sample` every step, `eval_<calls>` on evaluation steps. */
  [envField: string]: number | Record<string, number> | undefined;
}

/** The environment's name for its calls in a step's metrics: the stem of its `<calls>_per_sample` field ("searches"), else "calls". */
export function callsWord(m: object): string {
  for (const k of Object.keys(m)) {
    const stem = /^(.+)_per_sample$/.exec(k)?.[1];
    if (stem !== undefined) return stem;
  }
  return "calls";
}

/**
 * The tool calls per sample of a step (`<calls>_per_sample`), and on
 * evaluation steps of the held-out set (`eval_<calls>`); the name is read
 * from the metrics when not given.
 */
export function callsOf(m: object, calls: string = callsWord(m)): { word: string; perSample: number; eval?: number } {
  const r = m as Record<string, unknown>;
  const per = r[`${calls}_per_sample`];
  const ev = r[`eval_${calls}`];
  return { word: calls, perSample: typeof per === "number" ? per : 0, ...(typeof ev === "number" ? { eval: ev } : {}) };
}

/** What `step()` returns. */
export interface StepResult {
  metrics: StepMetrics;
  /** The step's trajectories (one object per rollout call). */
  trajectories: ObjectRef[];
  /** Scored samples, for inspection. */
  samples: ScoredSample[];
  /** Agent runs: a sample to look at for each of the endpoint's counters that is not 0 (the alarms name them). */
  examples?: Record<string, { sample: string; text: string }>;
}

/** An evaluation's results on the held-out items of one category. */
export interface CategoryEval {
  category: string;
  em: number;
  callsPerSample: number;
  items: number;
}

/** Result of an evaluation. */
export interface EvalResult {
  em: number;
  callsPerSample: number;
  samples: ScoredSample[];
  /** EM and calls per item category (empty when the task's items have none), in category order. */
  byCategory: CategoryEval[];
}
