import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { HotpotQaError, loadHotpotQa } from "../../sdk/envs/searchr1/tasks/hotpotqa.js";

let dir = "";
before(async () => {
  dir = await mkdtemp(path.join(tmpdir(), "hearth-hotpotqa-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** An entry in HotpotQA's released format; titles repeat across questions like the real set. */
function entry(i: number, titles: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    _id: `5a8b57f25542995d1e6f${String(i).padStart(4, "0")}`,
    answer: `answer ${i}`,
    question: `Which thing is number ${i}?`,
    supporting_facts: [[titles[0], 0]],
    context: titles.map((t) => [t, [`${t} is a title.`, ` It has a second sentence about ${i}.`]]),
    type: i % 2 === 0 ? "bridge" : "comparison",
    level: "medium",
    ...extra,
  };
}

async function write(name: string, content: unknown): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, typeof content === "string" ? content : JSON.stringify(content, null, 1));
  return file;
}

function expectError(pattern: RegExp, file: string): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof HotpotQaError, `not a HotpotQaError: ${String(err)}`);
    assert.equal(err.file, file);
    assert.match(err.message, pattern);
    assert.ok(err.message.startsWith(file), "the message names the file");
    return true;
  };
}

test("two files: questions with golden answers, corpus of their context paragraphs deduplicated by title", async () => {
  const train = await write("train.json", [
    entry(0, ["Paris", "France"]),
    entry(1, ["Paris", "Lyon"]),
    entry(2, ["Berlin", "Germany"]),
  ]);
  const dev = await write("dev.json", [entry(10, ["France", "Marseille"]), entry(11, ["Rome", "Italy"], { answer: ["Rome", "Roma"] })]);
  const data = await loadHotpotQa({ train, validation: dev });
  assert.equal(data.train.length, 3);
  assert.equal(data.validation.length, 2);
  const q = [...data.train, ...data.validation].find((x) => x.id.endsWith("0001"))!;
  assert.deepEqual(q, { id: "5a8b57f25542995d1e6f0001", question: "Which thing is number 1?", golds: ["answer 1"], type: "comparison", level: "medium" });
  assert.deepEqual(data.validation.find((x) => x.id.endsWith("0011"))!.golds, ["Rome", "Roma"]);

  const titles = data.corpus.map((p) => p.title).sort();
  assert.deepEqual(titles, ["Berlin", "France", "Germany", "Italy", "Lyon", "Marseille", "Paris", "Rome"]);
  for (const p of data.corpus) assert.equal(p.id, p.title);
  const paris = data.corpus.find((p) => p.title === "Paris")!;
  assert.match(paris.text, /^Paris is a title\. It has a second sentence about [01]\.$/);
});

test("selection is seeded: counts, reproducibility, and only selected questions feed the corpus", async () => {
  const all = Array.from({ length: 40 }, (_, i) => entry(i, [`T${i}`, `Shared${i % 3}`]));
  const file = await write("one.json", all);
  const a = await loadHotpotQa(file, { train: 10, validation: 5, seed: 7 });
  const b = await loadHotpotQa(file, { train: 10, validation: 5, seed: 7 });
  const c = await loadHotpotQa(file, { train: 10, validation: 5, seed: 8 });
  assert.deepEqual(a, b);
  assert.notDeepEqual(
    a.train.map((q) => q.id),
    c.train.map((q) => q.id),
  );
  assert.equal(a.train.length, 10);
  assert.equal(a.validation.length, 5);
  const ids = new Set(a.train.map((q) => q.id));
  assert.ok(
    a.validation.every((q) => !ids.has(q.id)),
    "validation is disjoint from train in single-file mode",
  );
  const selected = [...a.train, ...a.validation].map((q) => Number(q.id.slice(-4)));
  assert.deepEqual(a.corpus.filter((p) => p.title.startsWith("T")).map((p) => Number(p.title.slice(1))).sort((x, y) => x - y), selected.sort((x, y) => x - y));
  assert.equal(a.corpus.filter((p) => p.title.startsWith("Shared")).length, 3);

  const defaults = await loadHotpotQa(file);
  assert.equal(defaults.validation.length, 20, "one file: validation defaults to min(200, half)");
  assert.equal(defaults.train.length, 20);
  await assert.rejects(loadHotpotQa(file, { train: 39, validation: 5 }), expectError(/asked for 39 training questions, but only 35 are available after 5 validation/, file));
  await assert.rejects(loadHotpotQa(file, { validation: -1 }), expectError(/integer ≥ 0/, file));
});

test("large files are parsed element by element with the same result", async () => {
  const all = [entry(0, ["A, \"quoted\" [title]", "B}"]), entry(1, ["C\\", "D"]), entry(2, ["E"])];
  const file = await write("chunked.json", all);
  const whole = await loadHotpotQa(file, { validation: 1, seed: 3 });
  const chunked = await loadHotpotQa(file, { validation: 1, seed: 3, chunkedParseAbove: 0 });
  assert.deepEqual(chunked, whole);
  assert.equal(whole.corpus.length, 5);
  const broken = await write("broken-chunked.json", '[{"_id": "x"}, {"_id": ');
  await assert.rejects(loadHotpotQa(broken, { chunkedParseAbove: 0 }), expectError(/not valid JSON/, broken));
  const obj = await write("obj-chunked.json", '{"data": []}');
  await assert.rejects(loadHotpotQa(obj, { chunkedParseAbove: 0 }), expectError(/expected a JSON array/, obj));
});

test("bad files give errors naming the file and what is wrong", async () => {
  const missing = path.join(dir, "nope.json");
  await assert.rejects(loadHotpotQa(missing), expectError(/cannot read the file \(ENOENT\)/, missing));
  const notJson = await write("not-json.json", "this is { not json");
  await assert.rejects(loadHotpotQa(notJson), expectError(/not valid JSON/, notJson));
  const notArray = await write("object.json", { data: [entry(0, ["A"])] });
  await assert.rejects(loadHotpotQa(notArray), expectError(/expected a JSON array of questions, got an object/, notArray));
  const notObject = await write("numbers.json", [entry(0, ["A"]), 5]);
  await assert.rejects(loadHotpotQa(notObject), expectError(/entry 1 is a number, not an object/, notObject));

  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ["no-id", { _id: undefined }, /entry 1: "_id" is missing/],
    ["no-question", { question: 3 }, /entry 1 \(_id 5a8b57f25542995d1e6f0001\): "question" is missing or not a string/],
    ["no-answer", { answer: undefined }, /"answer" is missing/],
    ["no-context", { context: undefined }, /"context" is missing/],
    ["bad-pair", { context: [["A", ["s"]], ["B", "not a list"]] }, /"context"\[1\] is not a \[title, sentences\[\]\] pair/],
  ];
  for (const [name, patch, pattern] of cases) {
    const file = await write(`${name}.json`, [entry(0, ["A"]), entry(1, ["B"], patch)]);
    await assert.rejects(loadHotpotQa(file), expectError(pattern, file), name);
  }
  const train = await write("ok.json", [entry(0, ["A"])]);
  const badDev = await write("bad-dev.json", [{ _id: "x" }]);
  await assert.rejects(loadHotpotQa({ train, validation: badDev }), expectError(/"question" is missing/, badDev));
});
