/**
 * An episode session: the token ids of one agent's episode, kept exactly as
 * sampled. A request's prompt, rendered by the chat template, is compared as
 * text with the session's current sequence (its last prompt plus the
 * completion's decoded text): when it extends it, the request continues the
 * same tokens (the sampled ids as sampled, the new text encoded alone and
 * appended with mask 0), on the engine's cached keys and values where they
 * are still held; when it does not (the agent rewrote the history, the
 * template dropped earlier reasoning, a stop string was cut from the
 * content), the sequence is closed and a new one starts from the whole
 * rendered prompt: the episode trains as separate sequences, never a spliced
 * one, and `prefixMismatches` counts it. Only sampled ids have mask 1, each
 * with its sampler logprob; each completion's ids are recorded with the
 * digest the engine computed of them, which the trainer checks again.
 */
import type { TemplateMessage } from "../text/chat-messages.js";
import type { SampledRun } from "../types.js";
import type { ParseFailure } from "./tool-parsers.js";

export type { SampledRun } from "../types.js";

/** What a session is for: its task item (and the item's place in its rollout call: its group), which sample of the group, and its seed. */
export interface SessionSpec {
  itemId: string;
  question: string;
  /** The item's index in its rollout call: the trajectories' `group`. */
  item: number;
  /** Which of the item's G samples this is. */
  sample: number;
  /** The row seed every completion of the session samples with (deriveSeed(item seed, sample)). */
  seed: number;
  /** The run's sampling for this session (0: greedy, an evaluation's), unless the run honours the agent's. */
  temperature: number;
  topP: number;
}


/** One training sequence of an episode. */
export interface EpisodeSequence {
  promptLength: number;
  /** The text its tokens stand for (the rendered prompts and the decoded completions). */
  text: string;
  /** The rendered prompt it started with (the first `promptLength` tokens). */
  promptText: string;
  tokens: number[];
  mask: number[];
  logprobs: number[];
  sampled: SampledRun[];
  /** Tool calls parsed from its completions (`name(arguments JSON)`). */
  calls: string[];
}

/** How a request is fed: continuing the current sequence, or a new one. */
export interface Plan {
  /** The rendered prompt (forced prefix included). */
  text: string;
  /** The ids already in the sequence (continuing), else none. */
  prefix: readonly number[];
  /** The ids to add: the new text alone (continuing), or the whole prompt. */
  append: number[];
  /** The engine row holding the prefix's keys and values, and how many ids it must hold. */
  from?: { session: number; row: number; expect: number };
  /** The rendered prompt does not extend the current sequence: it was closed. */
  mismatch: boolean;
}

/** Why a session ended, and what it gave. */
export interface SessionEnd {
  answer?: string;
  reward?: number;
  error?: string;
}

/** Counters of a session (summed into a step's metrics). */
export interface SessionStats {
  requests: number;
  completionTokens: number;
  toolCalls: number;
  parseFailures: ParseFailure[];
  prefixMismatches: number;
  /** Requests answered with no tokens because a limit (turns, response tokens) was reached. */
  lengthCuts: number;
}

/** One episode's session (see the file's header). */
export class AgentSession {
  readonly sequences: EpisodeSequence[] = [];
  current?: EpisodeSequence;
  /** Where the engine holds the current sequence's keys and values. */
  engineRow?: { session: number; row: number };
  busy = false;
  ended?: SessionEnd;
  /** The last request's messages and the reply to it: the episode as the agent saw it. */
  transcript: TemplateMessage[] = [];
  readonly stats: SessionStats = { requests: 0, completionTokens: 0, toolCalls: 0, parseFailures: [], prefixMismatches: 0, lengthCuts: 0 };

  constructor(
    readonly id: string,
    /** sha256 of the session's key (the key itself is never kept). */
    readonly keyHash: string,
    readonly spec: SessionSpec,
    /** The lease it belongs to. */
    readonly lease: string,
  ) {}

  /** A label for errors and warnings: the item and the sample. */
  get label(): string {
    return `${this.spec.itemId}#${this.spec.sample}`;
  }

  /** Tokens of the response so far (sampled and appended after each sequence's first prompt). */
  get responseTokens(): number {
    const of = (s: EpisodeSequence): number => s.tokens.length - s.promptLength;
    return this.sequences.reduce((n, s) => n + of(s), 0) + (this.current ? of(this.current) : 0);
  }

  /** Decides how a prompt rendered as `text` is fed (see the file's header); closes the current sequence on a mismatch. */
  plan(text: string, encode: (t: string) => number[]): Plan {
    const cur = this.current;
    if (cur && text.startsWith(cur.text)) {
      const from = this.engineRow ? { ...this.engineRow, expect: cur.tokens.length } : undefined;
      return { text, prefix: cur.tokens.slice(), append: encode(text.slice(cur.text.length)), from, mismatch: false };
    }
    const mismatch = cur !== undefined;
    if (cur) {
      this.stats.prefixMismatches++;
      this.closeCurrent();
    }
    return { text, prefix: [], append: encode(text), mismatch };
  }

  /** Records a completion of `plan`: the appended ids (mask 0), the sampled ids (mask 1, with logprobs) and where the engine now holds the row. */
  commit(plan: Plan, sampled: { tokens: ArrayLike<number>; logprobs: ArrayLike<number>; digest: string; text: string }, engineRow: { session: number; row: number }): void {
    const seq: EpisodeSequence = plan.prefix.length > 0 && this.current ? this.current : { promptLength: plan.append.length, text: "", promptText: plan.text, tokens: [], mask: [], logprobs: [], sampled: [], calls: [] };
    for (const t of plan.append) {
      seq.tokens.push(t);
      seq.mask.push(0);
      seq.logprobs.push(0);
    }
    const at = seq.tokens.length;
    for (let i = 0; i < sampled.tokens.length; i++) {
      seq.tokens.push(sampled.tokens[i]!);
      seq.mask.push(1);
      seq.logprobs.push(sampled.logprobs[i]!);
    }
    seq.sampled.push({ at, n: sampled.tokens.length, digest: sampled.digest });
    seq.text = plan.text + sampled.text;
    this.current = seq;
    this.engineRow = engineRow;
    this.stats.completionTokens += sampled.tokens.length;
  }

  /** Closes the current sequence (it keeps what it has; the engine row is no longer continued). */
  closeCurrent(): void {
    if (this.current && this.current.sampled.length > 0) this.sequences.push(this.current);
    this.current = undefined;
    this.engineRow = undefined;
  }

  /** Every sequence with sampled ids, the current one last. */
  allSequences(): EpisodeSequence[] {
    return this.current && this.current.sampled.length > 0 ? [...this.sequences, this.current] : [...this.sequences];
  }
}
