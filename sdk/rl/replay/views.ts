/**
 * How a replayed episode looks: in a notebook, each generated token coloured
 * by its probability (hover for its top-k alternatives and entropy),
 * observations marked as inserted, what a what-if forced marked apart, the
 * prompt folded; in a terminal, the same with ANSI colours; as a table, one
 * row a token. A what-if branch shows beside the original from where they
 * diverge. Pure functions of the JSON (episode.ts).
 */
import { escapeHtml } from "../../notebook/index.js";
import type { ReplayJSON, TokenRow } from "./episode.js";

/** Probability bands, most likely first: [lower bound, HTML colour, ANSI 256-colour]. */
const BANDS: Array<[number, string, number]> = [
  [0.9, "#b2f2bb", 114],
  [0.5, "#d8f5a2", 150],
  [0.2, "#ffec99", 221],
  [0.05, "#ffd8a8", 215],
  [0, "#ffc9c9", 203],
];

function band(p: number): [number, string, number] {
  return BANDS.find(([lo]) => p >= lo)!;
}

const KIND_HTML: Record<string, string> = {
  prompt: "color:#868e96",
  observation: "background:#dbe8ff;color:#0b2f66;border-bottom:1px dashed #4c6ef5",
  forced: "background:#e5dbff;color:#5f3dc4;outline:1px solid #7950f2",
};

/** The alternatives of a token as one line: `48 (0.91) · 47 (0.05)`. */
export function alternativesText(r: TokenRow): string {
  return (r.top ?? []).map((a) => `${JSON.stringify(a.text)} ${a.p.toFixed(3)}`).join(" · ");
}

/** A token as an HTML span. */
function tokenHtml(r: TokenRow): string {
  const text = escapeHtml(r.text);
  if (r.kind !== "generated") return `<span class="hearth-tok hearth-${r.kind}" data-i="${r.i}" title="${r.kind} token ${r.i} (id ${r.id})" style="${KIND_HTML[r.kind]}">${text}</span>`;
  const p = r.p ?? 0;
  const title = `token ${r.i} (id ${r.id}), turn ${r.turn}: p ${p.toFixed(4)}${r.entropy !== undefined ? `, entropy ${r.entropy.toFixed(3)}` : ""}${r.top ? `\nalternatives: ${alternativesText(r)}` : ""}`;
  return `<span class="hearth-tok hearth-generated" data-i="${r.i}" data-p="${p.toFixed(6)}" title="${escapeHtml(title)}" style="background:${band(p)[1]};cursor:help">${text}</span>`;
}

/** The header line of a replay. */
export function replayHeader(j: ReplayJSON): string {
  const check = j.version !== j.sampledWith ? `at version ${j.version} (sampled with ${j.sampledWith}; not compared)` : j.matched ? `equal to the recording, token for token and logprob for logprob` : `not compared (tools run again)`;
  return `replay of sample ${j.sample} of step ${j.step} (${j.itemId}), policy version ${j.version}: ${check}; reward ${j.reward}, answer ${JSON.stringify(j.answer)}, finish ${j.finish}; ${j.turns} turn(s), replayed in ${j.seconds.toFixed(2)} s (+${j.loadSeconds.toFixed(2)} s loading the version)`;
}

/** A replay as HTML: the prompt folded, then the episode coloured by probability. */
export function replayHtml(j: ReplayJSON): string {
  const prompt = j.tokens.filter((r) => r.kind === "prompt");
  const rest = j.tokens.filter((r) => r.kind !== "prompt");
  const legend = BANDS.map(([lo, c], k) => `<span style="background:${c};padding:0 4px">${k === 0 ? `p ≥ ${lo}` : `≥ ${lo}`}</span>`).join(" ");
  return (
    `<div class="hearth-replay" style="font-family:system-ui,sans-serif"><p><b>${escapeHtml(replayHeader(j))}</b></p>` +
    `<p style="font-size:12px">generated: ${legend} · <span style="${KIND_HTML.observation}">inserted observation</span> · <span style="${KIND_HTML.forced}">forced</span> · hover a token for its alternatives</p>` +
    `<details><summary style="cursor:pointer;font-size:12px">the prompt (${prompt.length} tokens)</summary><div style="font-family:monospace;white-space:pre-wrap">${prompt.map(tokenHtml).join("")}</div></details>` +
    `<div style="font-family:monospace;white-space:pre-wrap;line-height:1.7">${rest.map(tokenHtml).join("")}</div></div>`
  );
}

/** A token for a terminal: ANSI colour by probability (or kind); newlines shown. */
function tokenAnsi(r: TokenRow, color: boolean): string {
  const text = r.text.replace(/\n/g, "⏎\n");
  if (!color) return r.kind === "observation" ? `[${text}]` : r.kind === "forced" ? `{${text}}` : text;
  if (r.kind === "observation") return `\x1b[2;34m${text}\x1b[0m`;
  if (r.kind === "forced") return `\x1b[1;35m${text}\x1b[0m`;
  if (r.kind === "prompt") return `\x1b[2m${text}\x1b[0m`;
  return `\x1b[38;5;${band(r.p ?? 0)[2]}m${text}\x1b[0m`;
}

/** A replay for a terminal: the header, the episode coloured (prompt omitted unless `prompt`), and the least likely tokens with their alternatives. */
export function replayText(j: ReplayJSON, o: { color?: boolean; prompt?: boolean; lowest?: number } = {}): string {
  const color = o.color ?? false;
  const body = j.tokens.filter((r) => o.prompt || r.kind !== "prompt").map((r) => tokenAnsi(r, color)).join("");
  const lowest = [...j.tokens.filter((r) => r.kind === "generated")].sort((a, b) => (a.p ?? 0) - (b.p ?? 0)).slice(0, o.lowest ?? 5);
  const legend = color ? BANDS.map(([lo, , c]) => `\x1b[38;5;${c}mp≥${lo}\x1b[0m`).join(" ") + " \x1b[2;34minserted\x1b[0m \x1b[1;35mforced\x1b[0m" : "generated text plain, [inserted], {forced}";
  const low = lowest.map((r) => `  token ${r.i} (turn ${r.turn}) ${JSON.stringify(r.text)} p ${(r.p ?? 0).toFixed(4)}${r.entropy !== undefined ? ` entropy ${r.entropy.toFixed(3)}` : ""}${r.top ? `; alternatives ${alternativesText(r)}` : ""}`);
  return [replayHeader(j), legend, body, "", `the ${lowest.length} least likely generated tokens:`, ...low].join("\n");
}

/** A what-if branch beside the original from where they diverge (HTML). */
export function branchHtml(original: ReplayJSON, branch: ReplayJSON, at: number, what: string, reward?: number): string {
  const after = (j: ReplayJSON): string => j.tokens.filter((r) => r.i >= at).map(tokenHtml).join("");
  const before = original.tokens.filter((r) => r.kind !== "prompt" && r.i < at).map(tokenHtml).join("");
  const col = (title: string, body: string): string => `<div style="flex:1;min-width:0"><p style="margin:2px 0"><b>${escapeHtml(title)}</b></p><div style="font-family:monospace;white-space:pre-wrap;line-height:1.7;border-left:3px solid #adb5bd;padding-left:6px">${body}</div></div>`;
  return (
    `<div class="hearth-branch" style="font-family:system-ui,sans-serif"><p><b>what if: ${escapeHtml(what)}</b> (from token ${at}; the branch never trains)</p>` +
    `<div style="font-family:monospace;white-space:pre-wrap;color:#495057">${before}</div>` +
    `<div style="display:flex;gap:12px">${col(`original: reward ${original.reward}, answer ${JSON.stringify(original.answer)}`, after(original))}${col(`branch${reward !== undefined ? `: reward ${reward}` : ""}, answer ${JSON.stringify(branch.answer)}`, after(branch))}</div></div>`
  );
}

/** A what-if branch as text: the shared part, then the original and the branch from where they diverge. */
export function branchText(original: ReplayJSON, branch: ReplayJSON, at: number, what: string, reward?: number): string {
  const text = (j: ReplayJSON, from: number): string => j.tokens.filter((r) => r.i >= from).map((r) => tokenAnsi(r, false)).join("");
  return [
    `what if: ${what} (from token ${at}; the branch never trains)`,
    `original (reward ${original.reward}, answer ${JSON.stringify(original.answer)}): ${text(original, at)}`,
    `branch${reward !== undefined ? ` (reward ${reward}` : " ("}, answer ${JSON.stringify(branch.answer)}): ${text(branch, at)}`,
  ].join("\n");
}
