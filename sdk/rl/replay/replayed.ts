/**
 * A replayed episode as a notebook or a script holds it (`run.replay(…)`):
 * its tokens with their probabilities and alternatives (a table, an HTML
 * view, a terminal view, JSON), and what-if branches from any point: force a
 * token or a text at a generated position (`ep.at(turn, token).force("…")`),
 * or replace the observation after a turn (`ep.turn(k).withObservation("…")`),
 * then `continue()` generation with the same policy version and row seed. A
 * branch is shown beside the original from where they diverge and never
 * trains. The episode knows nothing of where it runs: a `Brancher` (the
 * run's, or a cluster run's loop) does the work.
 */
import { JUPYTER_DISPLAY, table, type DataTable, type MimeBundle } from "../../notebook/index.js";
import type { ReplayJSON, TokenRow } from "./episode.js";
import { turnSpan } from "./episode.js";
import { alternativesText, branchHtml, branchText, replayHtml, replayText } from "./views.js";

/** What a branch asks of the run: continue the episode's ids up to `at`, then `insert` (text), at the episode's version and seed. */
export interface BranchAsk {
  step: number;
  sample: number;
  version: number;
  /** Keep the episode's first `at` tokens, then insert `insert`. */
  at: number;
  insert: string;
  /** The insert replaces a generated token's text ("forced") or an observation ("observation"). */
  kind: "forced" | "observation";
}

/** Runs a branch and returns it as a replayed episode (the forced tokens marked) with its reward. */
export type Brancher = (ask: BranchAsk) => Promise<{ episode: ReplayJSON; reward?: number }>;

/** A what-if branch, continued (see the file's header). */
export class BranchResult {
  constructor(
    readonly original: ReplayJSON,
    readonly branch: ReplayJSON,
    /** Where the branch starts (the forced or replaced text's first token). */
    readonly at: number,
    readonly what: string,
    readonly reward?: number,
  ) {}

  /** Where the branch's tokens first differ from the original's (it starts at `at` at the latest). */
  get divergesAt(): number {
    const a = this.original.tokens;
    const b = this.branch.tokens;
    for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i]?.id !== b[i]?.id) return i;
    return Math.max(a.length, b.length);
  }

  toJSON(): { what: string; at: number; divergesAt: number; reward?: number; original: ReplayJSON; branch: ReplayJSON } {
    return { what: this.what, at: this.at, divergesAt: this.divergesAt, ...(this.reward !== undefined ? { reward: this.reward } : {}), original: this.original, branch: this.branch };
  }

  terminal(): string {
    return branchText(this.original, this.branch, this.divergesAt, this.what, this.reward);
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    return { "text/plain": this.terminal(), "text/html": branchHtml(this.original, this.branch, this.divergesAt, this.what, this.reward) };
  }
}

/** A what-if not yet continued. */
export class Branch {
  constructor(
    private readonly ep: EpisodeReplay,
    private readonly ask: BranchAsk,
    readonly what: string,
  ) {}

  /** Continues generation from the branch point (same version, same row seed; tools run for new calls). */
  async continue(): Promise<BranchResult> {
    const r = await this.ep.brancher(this.ask);
    return new BranchResult(this.ep.json, r.episode, this.ask.at, this.what, r.reward);
  }
}

/** A generated position of the episode, to branch from. */
export class BranchPoint {
  constructor(
    private readonly ep: EpisodeReplay,
    readonly at: number,
  ) {}

  /** Replaces what the policy generated from here with `text` (tokenised as the run's tokenizer does), then continues. */
  force(text: string): Branch {
    const was = this.ep.json.tokens[this.at]!;
    return new Branch(this.ep, { step: this.ep.json.step, sample: this.ep.json.sample, version: this.ep.json.version, at: this.at, insert: text, kind: "forced" }, `force ${JSON.stringify(text)} at token ${this.at} (was ${JSON.stringify(was.text)})`);
  }
}

/** A replayed episode (see the file's header). */
export class EpisodeReplay {
  constructor(
    readonly json: ReplayJSON,
    readonly brancher: Brancher,
  ) {}

  /** Every token checked equal to the recording (tokens and logprobs). */
  get matched(): boolean {
    return this.json.matched;
  }

  /** The generated tokens, one row each: turn, text, probability, entropy and alternatives. */
  tokens(o: { limit?: number } = {}): DataTable {
    const rows = this.json.tokens.filter((r) => r.kind === "generated").map((r: TokenRow) => ({ i: r.i, turn: r.turn, token: r.text, id: r.id, p: r.p ?? NaN, logprob: r.logprob ?? NaN, entropy: r.entropy ?? NaN, alternatives: alternativesText(r) }));
    return table(rows, { title: `step ${this.json.step}, sample ${this.json.sample}: ${rows.length} generated tokens`, limit: o.limit ?? 400 });
  }

  /** The generated token `token` (0-based) of turn `turn`, to branch from. */
  at(turn: number, token: number): BranchPoint {
    const [a, b] = turnSpan(this.json.tokens, turn);
    if (!Number.isInteger(token) || token < 0 || a + token >= b) throw new RangeError(`token ${token}: turn ${turn} has generated tokens 0–${b - a - 1}`);
    return new BranchPoint(this, a + token);
  }

  /** Turn `k`, to branch from what came after it. */
  turn(k: number): { withObservation(text: string): Branch } {
    const [, end] = turnSpan(this.json.tokens, k);
    return {
      withObservation: (text: string): Branch => {
        const obs = this.json.tokens.filter((r) => r.kind === "observation" && r.turn === k);
        if (obs.length === 0) throw new RangeError(`turn ${k} inserted no observation (the episode ended there)`);
        return new Branch(this, { step: this.json.step, sample: this.json.sample, version: this.json.version, at: end, insert: text, kind: "observation" }, `the observation after turn ${k} is ${JSON.stringify(text)} (was ${JSON.stringify(obs.map((r) => r.text).join(""))})`);
      },
    };
  }

  toJSON(): ReplayJSON {
    return this.json;
  }

  /** The episode for a terminal (ANSI colours with `color`). */
  terminal(o: { color?: boolean; prompt?: boolean } = {}): string {
    return replayText(this.json, o);
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    return { "text/plain": replayText(this.json), "text/html": replayHtml(this.json) };
  }
}
