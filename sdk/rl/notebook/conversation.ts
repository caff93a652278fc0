/**
 * An agent episode as the agent saw it: its messages (system, user,
 * assistant with tool calls, tool results), each marked by what training
 * does with it. The assistant's replies are what the policy sampled (mask 1,
 * trained); everything else was rendered by the chat template around them
 * (mask 0: the loss ignores it), tool results included. The trajectory view
 * shows it above the token spans; pure, so it is cheap to test.
 */
import { escapeHtml } from "../../notebook/index.js";
import type { TranscriptMessage } from "../types.js";

/** How each role is drawn, and what training does with it. */
const ROLE: Record<TranscriptMessage["role"], { style: string; trained: boolean }> = {
  system: { style: "background: #eeeeee; color: #555555", trained: false },
  user: { style: "background: #eeeeee; color: #333333", trained: false },
  assistant: { style: "background: #d4f7d4; color: #0b4d0b", trained: true },
  tool: { style: "background: #dbe8ff; color: #0b2f66", trained: false },
};

/** A tool call as one line: `calc({"expression": "4 * 12"})`. */
export function callText(c: NonNullable<TranscriptMessage["tool_calls"]>[number]): string {
  return `${c.function.name}(${JSON.stringify(c.function.arguments)})`;
}

function tag(m: TranscriptMessage): string {
  return ROLE[m.role].trained ? "sampled · trained" : m.role === "tool" ? "tool result · masked" : "masked";
}

/** The messages as text, one block each. */
export function conversationText(messages: readonly TranscriptMessage[]): string {
  return messages
    .map((m) => {
      const calls = (m.tool_calls ?? []).map((c) => `  → ${callText(c)}`).join("\n");
      return `[${m.role} · ${tag(m)}] ${m.content}${calls ? `\n${calls}` : ""}`;
    })
    .join("\n");
}

/** The messages as HTML blocks: trained replies green, template-rendered turns grey, tool results blue. */
export function conversationHtml(messages: readonly TranscriptMessage[]): string {
  const blocks = messages.map((m) => {
    const calls = (m.tool_calls ?? []).map((c) => `<div style="font-family: monospace">→ <b>${escapeHtml(c.function.name)}</b>(${escapeHtml(JSON.stringify(c.function.arguments))})</div>`).join("");
    const body = m.content === "" && calls ? "" : `<div style="white-space: pre-wrap">${escapeHtml(m.content)}</div>`;
    return `<div class="hearth-message hearth-${m.role}" style="${ROLE[m.role].style}; margin: 4px 0; padding: 4px 8px; border-radius: 4px"><small><b>${m.role}</b> · ${tag(m)}</small>${body}${calls}</div>`;
  });
  return `<div class="hearth-conversation">${blocks.join("")}</div>`;
}
