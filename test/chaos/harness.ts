/**
 * What every chaos test does around its kill: send N tagged calls, each with
 * a deadline, and account for every one of them afterwards (answered,
 * failed and how, when), and read detection times off the head's log, whose
 * lines carry ISO timestamps from the same clock as the test.
 */
import assert from "node:assert/strict";

/** How one call ended. */
export interface CallOutcome<V extends Answer = Answer> {
  tag: number;
  /** Milliseconds from sending to settling. */
  ms: number;
  /** Milliseconds from the kill to settling (negative: it ended before the kill). */
  afterKillMs: number;
  value?: V;
  error?: Error;
}

/** What a tagged call answers: at least its tag and where it ran. */
export interface Answer {
  tag: number;
  executorId: string;
}

/** N calls in flight, with a way to stamp the kill and to wait for all of them. */
export interface Salvo<V extends Answer> {
  /** Call the moment before the signal is sent. */
  markKill(): number;
  /** Resolves once every call settled, each exactly once. */
  settled(): Promise<Array<CallOutcome<V>>>;
}

/** Sends `n` calls through `send` (call i carries tag i) and records how each ends. */
export function salvo<V extends Answer>(n: number, send: (tag: number) => Promise<V>): Salvo<V> {
  let killedAt = Number.NaN;
  const outcomes = Array.from({ length: n }, (_, tag) => {
    const t0 = Date.now();
    const done = (o: Partial<CallOutcome<V>>): CallOutcome<V> => ({ tag, ms: Date.now() - t0, afterKillMs: Date.now() - killedAt, ...o });
    return send(tag).then((value) => done({ value }), (error: Error) => done({ error }));
  });
  return {
    markKill: () => (killedAt = Date.now()),
    settled: () => Promise.all(outcomes),
  };
}

/**
 * The promises of the chaos tests, checked for every call: it ended (none
 * lost), within its deadline, and an answer carries its own tag (none
 * answered for another). Returns the answered and the failed calls.
 */
export function account<V extends Answer>(outcomes: Array<CallOutcome<V>>, deadlineMs: number): { answered: Array<CallOutcome<V>>; failed: Array<CallOutcome<V>>; lastAfterKillMs: number } {
  for (const o of outcomes) {
    assert.ok(o.ms <= deadlineMs, `call ${o.tag} ended after ${o.ms} ms, past its ${deadlineMs} ms deadline`);
    if (o.value) assert.equal(o.value.tag, o.tag, `call ${o.tag} got the answer of call ${o.value.tag}`);
  }
  return {
    answered: outcomes.filter((o) => o.value),
    failed: outcomes.filter((o) => o.error),
    lastAfterKillMs: Math.max(...outcomes.map((o) => o.afterKillMs)),
  };
}

/** Milliseconds from `since` to the first head log line (after `since`) matching `pattern`, or undefined. */
export function loggedAfter(log: string, pattern: RegExp, since: number): number | undefined {
  for (const line of log.split("\n")) {
    const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z) /.exec(line);
    if (!m || !pattern.test(line)) continue;
    const at = Date.parse(m[1]!);
    if (at >= since) return at - since;
  }
  return undefined;
}

/** Prints one measured line for the report (docs/results.md quotes these). */
export function report(scenario: string, facts: Record<string, string | number>): void {
  console.log(`# chaos ${scenario}: ${Object.entries(facts).map(([k, v]) => `${k} ${v}`).join(", ")}`);
}
