/**
 * Input history kept on disk per kernel session, the way ipykernel keeps it
 * (IPython's history.sqlite: sessions numbered 1, 2, …; lines numbered by
 * execution_count). Node 20 has no built-in SQLite and a native module would
 * need a build step, so each session is one JSON-lines file
 * `<dir>/<session>.jsonl`, one `{ line, input, output }` object per executed
 * cell. A session number is taken by creating its file exclusively ("wx"), so
 * two kernels starting at once never share one.
 *
 * history_request (tail, range, search) is answered from these files.
 * Spec: https://jupyter-client.readthedocs.io/en/stable/messaging.html#history
 */
import { appendFileSync, closeSync, mkdirSync, openSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { hearthHome } from "../sdk/engines/local.js";

/** One stored cell. `output` is its result's text/plain, or null when it had none. */
export interface HistoryEntry {
  session: number;
  line: number;
  input: string;
  output: string | null;
}

/** Content of a history_request (the fields each access type reads). */
export interface HistoryRequest {
  output: boolean;
  raw: boolean;
  hist_access_type: "tail" | "range" | "search";
  session?: number;
  start?: number;
  stop?: number;
  n?: number;
  pattern?: string;
  unique?: boolean;
}

/** One history_reply item: [session, line, input] or [session, line, [input, output]]. */
export type HistoryItem = [number, number, string | [string, string | null]];

/** The default directory: `$HEARTH_HOME/kernel/history`. */
export function defaultHistoryDir(): string {
  return path.join(hearthHome(), "kernel", "history");
}

/** The history of every session in one directory; `session` is this kernel's. */
export class HistoryStore {
  /** This kernel's session number (1 for the first session ever kept in `dir`). */
  readonly session: number;
  private readonly file: string;

  private constructor(
    readonly dir: string,
    session: number,
  ) {
    this.session = session;
    this.file = path.join(dir, `${session}.jsonl`);
  }

  /** Opens `dir` (created if missing) and claims the next session number. */
  static open(dir: string = defaultHistoryDir()): HistoryStore {
    // Under HEARTH_HOME by default, and it holds what was typed: private.
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (let n = Math.max(0, ...sessionNumbers(dir)) + 1; ; n++) {
      try {
        closeSync(openSync(path.join(dir, `${n}.jsonl`), "wx", 0o600));
        return new HistoryStore(dir, n);
      } catch (err) {
        // Another kernel took this number between the listing and the create: try the next one.
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
    }
  }

  /** Appends one executed cell of this session. */
  record(line: number, input: string, output: string | null = null): void {
    appendFileSync(this.file, JSON.stringify({ line, input, output }) + "\n", { mode: 0o600 });
  }

  /** Every entry of `session` in line order (an unknown session has none). */
  entries(session: number): HistoryEntry[] {
    let text: string;
    try {
      text = readFileSync(path.join(this.dir, `${session}.jsonl`), "utf8");
    } catch {
      return [];
    }
    const out: HistoryEntry[] = [];
    for (const raw of text.split("\n")) {
      if (!raw.trim()) continue;
      try {
        const e = JSON.parse(raw) as { line: number; input: string; output: string | null };
        out.push({ session, line: e.line, input: e.input, output: e.output ?? null });
      } catch {
        // A line cut short by a crash mid-write: the rest of the file is still good.
      }
    }
    return out;
  }

  /** Every entry of every session, oldest first. */
  all(): HistoryEntry[] {
    return sessionNumbers(this.dir)
      .sort((a, b) => a - b)
      .flatMap((s) => this.entries(s));
  }

  /** Answers a history_request. `session` ≤ 0 counts back from this one (0 is this session), as in IPython. */
  query(req: HistoryRequest): HistoryItem[] {
    let found: HistoryEntry[];
    switch (req.hist_access_type) {
      case "tail":
        found = this.all().slice(-Math.max(0, req.n ?? 10));
        break;
      case "range": {
        const s = req.session ?? 0;
        const session = s > 0 ? s : this.session + s;
        const start = req.start ?? 1;
        const stop = req.stop ?? Number.POSITIVE_INFINITY;
        found = this.entries(session).filter((e) => e.line >= start && e.line < stop);
        break;
      }
      case "search": {
        const re = globToRegExp(req.pattern ?? "*");
        found = this.all().filter((e) => re.test(e.input));
        if (req.unique) {
          // Keep the latest occurrence of each input, in history order.
          const last = new Map(found.map((e, i) => [e.input, i]));
          found = found.filter((e, i) => last.get(e.input) === i);
        }
        if (req.n !== undefined && req.n !== null) found = found.slice(-Math.max(0, req.n));
        break;
      }
      default:
        throw new RangeError(`history_request: unknown hist_access_type '${String(req.hist_access_type)}' (use tail, range or search)`);
    }
    return found.map((e) => [e.session, e.line, req.output ? [e.input, e.output] : e.input]);
  }
}

function sessionNumbers(dir: string): number[] {
  return readdirSync(dir)
    .map((name) => /^(\d+)\.jsonl$/.exec(name)?.[1])
    .filter((n): n is string => n !== undefined)
    .map(Number);
}

/** SQLite GLOB semantics, which IPython's search uses: `*`, `?`, `[…]`, whole-string match. */
export function globToRegExp(pattern: string): RegExp {
  let re = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*") re += "[\\s\\S]*";
    else if (c === "?") re += "[\\s\\S]";
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 2);
      if (end < 0) re += "\\[";
      else {
        let body = pattern.slice(i + 1, end);
        if (body.startsWith("^")) body = "!" + body.slice(1);
        re += body.startsWith("!") ? `[^${body.slice(1).replace(/[\\\]]/g, "\\$&")}]` : `[${body.replace(/[\\\]]/g, "\\$&")}]`;
        i = end;
      }
    } else re += c.replace(/[.+^${}()|\\/]/g, "\\$&");
  }
  return new RegExp(`^${re}$`);
}
