/**
 * Alarms for the silent failures of training agents: tool calls that do not
 * parse (one report saw reward climb to 0.93 without a single tool call),
 * prompts that stop extending the sampled tokens (re-tokenisation, a
 * template that drops earlier reasoning), requests refused for capacity,
 * sessions that never call a tool, groups with no reward variance. Each is a
 * metric of every step (metrics.jsonl, the step card, the report); the first
 * time one passes its threshold in an agent run, a warning names it and a
 * sample to look at.
 */
import type { AgentRolloutStats, StepMetrics } from "../types.js";

/** One alarm: its metric, when it fires, and what its warning says. */
interface Alarm {
  metric: string;
  /** The example counter of the rollout stats that names a sample. */
  example?: keyof AgentRolloutStats | string;
  fires(m: StepMetrics): boolean;
  text(m: StepMetrics): string;
}

const pct = (x: number): string => `${(100 * x).toFixed(0)} %`;
const n = (m: StepMetrics, k: string): number => (typeof m[k] === "number" ? (m[k] as number) : 0);

/** The thresholds (shares of the step's sessions, calls or groups). */
export const ALARM_THRESHOLDS = { parseFailures: 0.05, prefixMismatches: 0.1, refused: 0, withoutCalls: 0.5, zeroVariance: 0.5 } as const;

const ALARMS: Alarm[] = [
  {
    metric: "tool_parse_failures",
    example: "parseFailures",
    fires: (m) => n(m, "tool_parse_failures") > ALARM_THRESHOLDS.parseFailures * Math.max(1, n(m, "tool_parse_failures") + n(m, "agent_tool_calls")),
    text: (m) => `${n(m, "tool_parse_failures")} tool call(s) did not parse (${pct(n(m, "tool_parse_failures") / Math.max(1, n(m, "tool_parse_failures") + n(m, "agent_tool_calls")))} of attempts; warn above ${pct(ALARM_THRESHOLDS.parseFailures)}): they reached the agent as plain content`,
  },
  {
    metric: "prefix_mismatches",
    example: "prefixMismatches",
    fires: (m) => n(m, "prefix_mismatches") > ALARM_THRESHOLDS.prefixMismatches * Math.max(1, n(m, "agent_sessions")),
    text: (m) => `${n(m, "prefix_mismatches")} request(s) rendered a prompt that did not extend the episode's sampled tokens (warn above ${pct(ALARM_THRESHOLDS.prefixMismatches)} of sessions): those episodes train as separate sequences (the agent rewrote its history, the template drops earlier turns, or a stop string was cut)`,
  },
  {
    metric: "refused_requests",
    example: undefined,
    fires: (m) => n(m, "refused_requests") > ALARM_THRESHOLDS.refused,
    text: (m) => `${n(m, "refused_requests")} request(s) were refused for capacity (429): agents that do not retry lose their episodes; raise --max-batch-rows or use fewer concurrent sessions per executor`,
  },
  {
    metric: "sessions_without_calls",
    example: "sessionsWithoutCalls",
    fires: (m) => n(m, "agent_sessions") > 0 && n(m, "sessions_without_calls") > ALARM_THRESHOLDS.withoutCalls * n(m, "agent_sessions"),
    text: (m) => `${n(m, "sessions_without_calls")} of ${n(m, "agent_sessions")} sessions never made a tool call (warn above ${pct(ALARM_THRESHOLDS.withoutCalls)}): is the agent still using its tools?`,
  },
  {
    metric: "zero_variance_share",
    example: undefined,
    fires: (m) => n(m, "zero_variance_share") > ALARM_THRESHOLDS.zeroVariance,
    text: (m) => `${pct(n(m, "zero_variance_share"))} of the step's groups had equal rewards for every sample (warn above ${pct(ALARM_THRESHOLDS.zeroVariance)}) and taught nothing: the task may be too easy or too hard for the policy, or the reward constant`,
  },
];

/** The agent endpoint's counters of a step's rollout calls, as metrics (absent when no call went through the endpoint). */
export function agentMetrics(stats: ReadonlyArray<AgentRolloutStats | undefined>): Record<string, number> {
  const s = stats.filter((x): x is AgentRolloutStats => x !== undefined);
  if (s.length === 0) return {};
  const sum = (k: keyof AgentRolloutStats): number => s.reduce((a, x) => a + (x[k] as number), 0);
  return {
    agent_sessions: sum("sessions"),
    agent_requests: sum("requests"),
    agent_tool_calls: sum("toolCalls"),
    tool_parse_failures: sum("parseFailures"),
    prefix_mismatches: sum("prefixMismatches"),
    refused_requests: sum("refused"),
    length_cuts: sum("lengthCuts"),
    sessions_without_calls: sum("sessionsWithoutCalls"),
    agent_failures: sum("failed"),
  };
}

/** The first example of each counter across a step's calls. */
export function agentExamples(stats: ReadonlyArray<AgentRolloutStats | undefined>): Record<string, { sample: string; text: string }> {
  const out: Record<string, { sample: string; text: string }> = {};
  for (const s of stats) for (const [k, v] of Object.entries(s?.examples ?? {})) out[k] ??= v;
  return out;
}

/**
 * The warnings of step `m` for alarms not raised before in the run (`raised`
 * is updated): each names its metric, what happened and a sample to look at.
 */
export function newAlarms(m: StepMetrics, examples: Readonly<Record<string, { sample: string; text: string }>>, raised: Set<string>): string[] {
  const out: string[] = [];
  // Agent runs only: an environment run's zero-variance share is a metric, not an alarm (the demo's early steps drop most groups by design).
  if (m.agent_sessions === undefined) return out;
  for (const a of ALARMS) {
    if (raised.has(a.metric) || !a.fires(m)) continue;
    raised.add(a.metric);
    const ex = a.example ? examples[a.example] : undefined;
    out.push(`${a.metric}: ${a.text(m)}${ex ? `; look at sample ${ex.sample}${ex.text ? ` (${ex.text.slice(0, 160)})` : ""}` : ""}`);
  }
  return out;
}
