/**
 * The agent tasks on the environment path (the peer of the agent endpoint):
 * the same conversation, token for token. The prompt is the system turn
 * with the tools as the chat template renders it (chat-format.ts
 * `systemWithTools`: given as the system message of a rendering without
 * tools, it is the same text) and the question as the user turn; generation
 * stops at `<|im_end|>` (stop strings are matched before end-of-turn ids, so
 * a call turn pauses there instead of ending the episode); a turn with
 * valid `<tool_call>` blocks is answered with exactly the tool-results turn
 * the template renders for the tools' answers (`toolResponses`), masked; a
 * turn with none, or with a call that does not parse, is the answer and ends
 * the episode (an agent gets such a turn from the endpoint as content and
 * stops).
 */
import type { Environment, EnvStep, EnvTurn } from "../../rl/environment.js";
import type { TaskItem } from "../../rl/types.js";
import { IM_END, systemWithTools, toolResponses } from "./chat-format.js";
import { parseToolCalls } from "./tool-calls.js";
import { CALC_TOOLSET, SEARCH_TOOLSET, chainWorld, type AgentToolset } from "./tools.js";

/** What a call past the layer's limit of tool calls is answered with (the tool does not run). */
export const CALLS_EXHAUSTED = "error: no more tool calls; give the final answer now";

/** A chat environment with tools in the Qwen2.5 format; `system` absent: the template's default line. */
export class ToolChatEnvironment implements Environment<null> {
  readonly stops: readonly string[] = [IM_END];
  private readonly systemText: string;

  constructor(
    readonly name: string,
    private readonly toolset: AgentToolset,
    system?: string,
  ) {
    this.systemText = systemWithTools(toolset.tools, system);
  }

  reset(item: TaskItem): { system: string; user: string; state: null } {
    return { system: this.systemText, user: item.question, state: null };
  }

  step(_state: null, turn: EnvTurn): EnvStep {
    const parsed = parseToolCalls(turn.text, this.toolset.tools);
    if (parsed.calls.length === 0) return { done: true };
    if (turn.callsLeft <= 0) return { observation: toolResponses(parsed.calls.map(() => CALLS_EXHAUSTED)) };
    return { observation: toolResponses(parsed.calls.map((c) => this.toolset.run(c))), call: parsed.calls.map((c) => this.toolset.describe(c)).join("; ") };
  }
}

/** The calculator task with the `calc` tool (module `environment.js`, export `AgentCalcEnvironment`). */
export class AgentCalcEnvironment extends ToolChatEnvironment {
  constructor() {
    super("agent-calculator", CALC_TOOLSET);
  }
}

/** The chain task with the `search` tool (export `AgentChainEnvironment`); each executor builds the index once. */
export class AgentChainEnvironment extends ToolChatEnvironment {
  constructor() {
    super("agent-chain", SEARCH_TOOLSET);
  }

  init(): void {
    chainWorld();
  }
}
