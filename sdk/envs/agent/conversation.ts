/**
 * Agent episodes as token sequences, cut where the agent endpoint cuts them:
 * the first prompt is the rendering of the agent's messages and tools
 * (`<|im_start|>assistant\n` at its end), encoded whole; then each turn the
 * policy samples (a call turn, or the answer, each ending with
 * `<|im_end|>`), encoded alone with mask 1; then each tool-results turn the
 * template renders after it, encoded alone with mask 0. The environment
 * path inserts the same pieces (environment.ts), and the warm start's
 * demonstrations are made here, so the policy learns the token ids it will
 * sample and read on either path.
 *
 * A demonstration follows a question's solution path (the tool calls that
 * answer it) in part: it always makes the first call, goes on to the next
 * with probability `explore[k]` after call k + 1, and otherwise answers the
 * result it has (wrong when the path is longer). RL has to discover the rest.
 */
import type { TemplateMessage, ToolSpec } from "../../rl/text/chat-messages.js";
import type { TextTokenizer } from "../../rl/text/tokenizer.js";
import { pick } from "../../rl/random.js";
import type { Demo } from "../../rl/types.js";
import { answerTurn, callTurn, renderAgentChat, toolResponses } from "./chat-format.js";
import type { ToolCall } from "./tool-calls.js";

/** One step of a solution path: the call, what the tool answers, and the answer the agent would give if it stopped there. */
export interface PathStep {
  call: ToolCall;
  result: string;
  answer: string;
}

/** An episode: the agent's first messages and tools, its turns of calls (with the tools' results), and its answer. */
export interface EpisodeScript {
  question: string;
  /** The system message (none: the template's default line). */
  system?: string;
  tools: readonly ToolSpec[];
  turns: Array<{ calls: ToolCall[]; results: string[] }>;
  answer: string;
}

/** The messages an agent sends for a question (a system message only when it has one). */
export function firstMessages(question: string, system?: string): TemplateMessage[] {
  return [...(system === undefined ? [] : [{ role: "system" as const, content: system }]), { role: "user", content: question }];
}

/** The first prompt's text: the messages and tools rendered, ending where the assistant speaks. */
export function promptText(question: string, tools: readonly ToolSpec[], system?: string): string {
  return renderAgentChat(firstMessages(question, system), tools);
}

/** The whole episode as OpenAI-shaped messages (what an agent has sent by its last request, plus its answer). */
export function episodeMessages(s: EpisodeScript): TemplateMessage[] {
  const out = firstMessages(s.question, s.system);
  s.turns.forEach((t, k) => {
    const ids = t.calls.map((_, j) => `call_${k}_${j}`);
    out.push({ role: "assistant", content: "", tool_calls: t.calls.map((c, j) => ({ id: ids[j], type: "function", function: { name: c.name, arguments: c.arguments } })) });
    t.results.forEach((r, j) => out.push({ role: "tool", tool_call_id: ids[j], content: r }));
  });
  out.push({ role: "assistant", content: s.answer });
  return out;
}

/** The episode's pieces in order: the prompt, then what the policy samples (train) and what is rendered between (not). */
export function episodePieces(s: EpisodeScript): Array<{ text: string; train: boolean }> {
  const out = [{ text: promptText(s.question, s.tools, s.system), train: false }];
  for (const t of s.turns) out.push({ text: callTurn(t.calls), train: true }, { text: toolResponses(t.results), train: false });
  out.push({ text: answerTurn(s.answer), train: true });
  return out;
}

/** Tokenizes an episode piece by piece (never across a boundary), mask 1 on what the policy samples. */
export function episodeDemo(tokenizer: TextTokenizer, s: EpisodeScript): Demo {
  const tokens: number[] = [];
  const mask: number[] = [];
  for (const p of episodePieces(s)) {
    const ids = tokenizer.encode(p.text);
    tokens.push(...ids);
    for (const _ of ids) mask.push(p.train ? 1 : 0);
  }
  return { tokens, mask };
}

/** How demonstrations vary the first prompt: system messages besides none, and the tool renderings. */
export interface PromptVariants {
  /** System messages an agent might send (drawn half the time; otherwise none). */
  systems: readonly string[];
  /** Renderings of the task's tools, the environment path's first (drawn half the time; otherwise one of the others). */
  tools: ReadonlyArray<readonly ToolSpec[]>;
}

/** Draws a first prompt's system message and tools. */
export function drawPrompt(r: () => number, v: PromptVariants): { system?: string; tools: readonly ToolSpec[] } {
  const system = r() < 0.5 || v.systems.length === 0 ? undefined : pick(r, v.systems);
  const tools = r() < 0.5 || v.tools.length === 1 ? v.tools[0]! : v.tools[1 + Math.floor(r() * (v.tools.length - 1))]!;
  return system === undefined ? { tools } : { system, tools };
}

/** The episode a demonstration shows for a question with solution path `path` (see the header for `explore`). */
export function exploringScript(r: () => number, question: string, path: readonly PathStep[], explore: readonly number[], prompt: { system?: string; tools: readonly ToolSpec[] }): EpisodeScript {
  let k = 0;
  const turns: EpisodeScript["turns"] = [];
  for (;;) {
    turns.push({ calls: [path[k]!.call], results: [path[k]!.result] });
    if (k + 1 < path.length && r() < (explore[k] ?? 0)) k++;
    else break;
  }
  return { question, ...prompt, turns, answer: path[k]!.answer };
}
