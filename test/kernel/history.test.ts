// The kernel's on-disk history (kernel/history.ts) with real files: sessions,
// tail, range, search, and two stores opened at once.
import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { globToRegExp, HistoryStore } from "../../kernel/history.js";

function withDir(fn: (dir: string) => void): void {
  const dir = mkdtempSync(path.join(tmpdir(), "hearth-history-"));
  try {
    fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("sessions are numbered 1, 2, … and a later session sees earlier ones in tail and search", () => {
  withDir((dir) => {
    const first = HistoryStore.open(dir);
    assert.equal(first.session, 1);
    first.record(1, "const a = 1;");
    first.record(2, "a + 1", "2");
    const second = HistoryStore.open(dir);
    assert.equal(second.session, 2);
    second.record(1, "a * 10", "10");
    assert.deepEqual(second.query({ hist_access_type: "tail", n: 2, output: false, raw: true }), [
      [1, 2, "a + 1"],
      [2, 1, "a * 10"],
    ]);
    assert.deepEqual(second.query({ hist_access_type: "tail", n: 1, output: true, raw: true }), [[2, 1, ["a * 10", "10"]]]);
    assert.deepEqual(second.query({ hist_access_type: "search", pattern: "a *", output: false, raw: true }), [
      [1, 2, "a + 1"],
      [2, 1, "a * 10"],
    ]);
  });
});

test("range: absolute session, 0 for this one, negative counting back; stop excluded", () => {
  withDir((dir) => {
    const first = HistoryStore.open(dir);
    for (let i = 1; i <= 4; i++) first.record(i, `cell ${i}`);
    const now = HistoryStore.open(dir);
    now.record(1, "current");
    const range = (session: number, start: number, stop?: number) => now.query({ hist_access_type: "range", session, start, stop, output: false, raw: true });
    assert.deepEqual(range(1, 2, 4), [
      [1, 2, "cell 2"],
      [1, 3, "cell 3"],
    ]);
    assert.deepEqual(range(0, 1), [[2, 1, "current"]]);
    assert.deepEqual(range(-1, 4), [[1, 4, "cell 4"]]);
    assert.deepEqual(range(7, 1), [], "an unknown session has no lines");
  });
});

test("search: unique keeps the latest of each input, n the last n matches", () => {
  withDir((dir) => {
    const h = HistoryStore.open(dir);
    ["x = 1", "y = 2", "x = 1", "x = 3"].forEach((code, i) => h.record(i + 1, code));
    const search = (extra: object) => h.query({ hist_access_type: "search", pattern: "x = ?", output: false, raw: true, ...extra });
    assert.deepEqual(search({}).map((e) => e[1]), [1, 3, 4]);
    assert.deepEqual(search({ unique: true }), [
      [1, 3, "x = 1"],
      [1, 4, "x = 3"],
    ]);
    assert.deepEqual(search({ n: 1 }), [[1, 4, "x = 3"]]);
  });
});

test("a line cut short by a crash is skipped; the lines around it are kept", () => {
  withDir((dir) => {
    const h = HistoryStore.open(dir);
    h.record(1, "before");
    appendFileSync(path.join(dir, "1.jsonl"), '{"line": 2, "inp');
    appendFileSync(path.join(dir, "1.jsonl"), "\n");
    h.record(3, "after");
    assert.deepEqual(h.entries(1).map((e) => e.input), ["before", "after"]);
  });
});

test("globToRegExp follows SQLite GLOB: *, ?, classes, whole string, literal regex characters", () => {
  assert.ok(globToRegExp("6 ? 7").test("6 * 7"));
  assert.ok(!globToRegExp("6 ? 7").test("6 * 7 "));
  assert.ok(globToRegExp("a*").test("a\nb"));
  assert.ok(globToRegExp("[ab]c").test("bc"));
  assert.ok(!globToRegExp("[!ab]c").test("ac"));
  assert.ok(globToRegExp("f(x).y").test("f(x).y"));
  assert.ok(!globToRegExp("f(x).y").test("f(x)zy"));
});
