/**
 * A scripted engine for the episode loop (a fake at the engine interface):
 * it plays back one script of turns per row, each turn the text the "model"
 * writes, ending at whichever of `stops` the text ends with (else at the
 * length limit), and records every call.
 */
import assert from "node:assert/strict";
import type { EpisodeEngine } from "../../sdk/rl/episodes.js";
import type { TextTokenizer } from "../../sdk/rl/text/tokenizer.js";
import type { GeneratedRow, SamplingOptions } from "../../sdk/tensor/types.js";

export class ScriptedEngine implements EpisodeEngine {
  readonly calls: Array<{ op: string; rows: number[]; appended?: number[][]; sampling: SamplingOptions }> = [];
  private turn: number[] = [];
  constructor(
    private readonly tok: TextTokenizer,
    private readonly stops: readonly string[],
    private readonly scripts: string[][],
  ) {}

  private row(i: number): GeneratedRow {
    const text = this.scripts[i]![this.turn[i]!++];
    if (text === undefined) return { tokens: new Int32Array(0), logprobs: new Float32Array(0), finishReason: "idle", stop: null };
    const ids = this.tok.encode(text);
    const stop = this.stops.find((s) => text.endsWith(s)) ?? null;
    return { tokens: Int32Array.from(ids), logprobs: Float32Array.from(ids.map(() => -0.5)), finishReason: stop ? "stop" : "length", stop };
  }

  async generate(prompts: readonly (Int32Array | readonly number[])[], sampling: SamplingOptions = {}) {
    this.turn = prompts.map(() => 0);
    this.calls.push({ op: "generate", rows: prompts.map((_, i) => i), sampling });
    return { session: 7, rows: prompts.map((_, i) => this.row(i)) };
  }

  async resume(session: number, appended: ReadonlyMap<number, Int32Array | readonly number[]>, sampling: SamplingOptions = {}) {
    assert.equal(session, 7);
    this.calls.push({ op: "resume", rows: [...appended.keys()], appended: [...appended.values()].map((a) => [...a]), sampling });
    return this.scripts.map((_, i) => (appended.has(i) ? this.row(i) : { tokens: new Int32Array(0), logprobs: new Float32Array(0), finishReason: "idle" as const, stop: null }));
  }

  async release() {
    this.calls.push({ op: "release", rows: [], sampling: {} });
    return { released: true };
  }
}
