// The run report on a synthetic 20-step history (no cluster): every section
// is found in the HTML with the numbers it must show (time split, curves by
// caption with step ticks and legends, the phase table, bytes, agreement and
// utilisation, one trajectory's spans, the options as rows), a history
// without the newer fields still renders, and the page is drawn in headless
// Chromium (screenshot kept in test-output/searchr1/report.png).
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import type { ScoredSample } from "../../sdk/rl/types.js";
import { SEARCH_WORDS } from "../../sdk/envs/searchr1/task.js";
import { warmStartClock, type RunEvent } from "../../sdk/rl/run/events.js";
import type { StepMetrics } from "../../sdk/rl/run/pipeline.js";
import { niceTicks } from "../../sdk/rl/report/report-svg.js";
import { DEFAULTS } from "../../sdk/envs/searchr1/run.js";
import { pickSample, writeReport, type ReportFacts } from "../../sdk/rl/report/report.js";
import { REPO_ROOT } from "../kernel/bridge.js";
import { assertDrawn } from "../kernel/notebook-rig.js";
import { CHROMIUM, screenshot } from "../kernel/render.js";

const KIB = 1024;

/**
 * 20 steps, evaluation every 10. Per step: rollout 1 s (odd) or 2 s (even),
 * update 0.8 s of which publish 0.05 s, 0.2 s of other work (3.2 s with an
 * evaluation), sync 0.3 s on step 1 and 0.02 s after. Rank 0 publishes a
 * 40 KiB patch, a 600 KiB full publication at step 11; two rollouts fetch
 * each publication (the first step fetches the set-up's full weights).
 */
function history(): StepMetrics[] {
  return Array.from({ length: 20 }, (_, k): StepMetrics => {
    const step = k + 1;
    const evalStep = step % 10 === 0;
    const rollout_s = step % 2 ? 1 : 2;
    const publish_bytes = step === 11 ? 600 * KIB : 40 * KIB;
    return {
      step,
      reward_mean: Math.min(1, 0.3 + step * 0.04),
      em: Math.min(1, 0.25 + step * 0.04),
      searches_per_sample: Math.min(1.25, 0.5 + step * 0.05),
      groups_kept: 10,
      groups_dropped: 6,
      samples_trained: 80,
      tokens: 9000,
      rollout_s,
      update_s: 0.8,
      publish_bytes,
      publish_s: 0.05,
      step_s: rollout_s + 0.8 + (evalStep ? 3.2 : 0.2),
      weights_version: step + 1,
      sync_bytes: step === 1 || step === 12 ? 2 * 600 * KIB : 2 * 40 * KIB,
      sync_executors: 2,
      sync_s: step === 1 ? 0.3 : 0.02,
      logprob_gap: 0.001,
      logprob_gap_max: step === 5 ? 0.2 : 0.004,
      kl: 0.001 * step,
      ratio_mean: 1,
      ratio_max: 1.1,
      clip_frac: 0.02,
      entropy: 1.2,
      loss: 0.01,
      grad_norm: 0.5,
      ...(evalStep ? { eval_em: step === 10 ? 0.9 : 0.95, eval_searches: 1.25 } : {}),
      max_lag: 0,
      policy_version: step,
      policy_lag_max: 0,
      policy_lag_mean: 0,
      stale_dropped: 0,
      rollout_busy_s: 0.9 * 2 * (rollout_s + 1),
      trainer_busy_s: 0.3 * 2 * (rollout_s + 1),
      rollout_util: 0.9,
      trainer_util: 0.3,
    };
  });
}

const VOCAB = ["[UNK]", "where", "was", "ada", "born", "?", "<search>", "ada", "</search>", "<information>", "ada", "lives", "in", "oslo", "</information>", "<answer>", "oslo", "</answer>", "paris"];
const decoder = { decode: (ids: ArrayLike<number>) => Array.from(ids, (i) => VOCAB[i] ?? "?").join(" ") };

/** Prompt [0, 5) · generated search [5, 8) · retrieved [8, 14) · generated answer [14, 17); `searched` false drops the search and its passage. */
function sample(answer: number, reward: number, searched: boolean): ScoredSample {
  const ids = searched ? [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, answer, 17] : [1, 2, 3, 4, 5, 15, answer, 17];
  const mask = ids.map((_, k) => (k < 5 || (searched && k >= 8 && k <= 13) ? 0 : 1));
  return {
    itemId: "q1",
    group: 0,
    promptLength: 5,
    tokens: Int32Array.from(ids),
    mask: Uint8Array.from(mask),
    logprobs: new Float32Array(ids.length),
    response: ids.slice(5).map((i) => VOCAB[i]).join(" "),
    calls: searched ? ["ada"] : [],
    finish: "answer",
    policyVersion: 20,
    question: "where was ada born ?",
    golds: ["oslo"],
    answer: VOCAB[answer]!,
    reward,
    advantage: reward - 0.33,
    kept: true,
  };
}

function facts(): ReportFacts {
  const samples = [sample(18, 0, false), sample(18, 0, true), sample(16, 1, true)];
  const picked = pickSample(samples);
  assert.equal(picked, samples[2], "the sample that searched and was right is the one shown");
  return {
    env: { title: "Search-R1", words: SEARCH_WORDS },
    start: { step: 0, em: 0.29, calls: 0.5 },
    final: { step: 20, em: 0.95, calls: 1.25 },
    seconds: 166,
    setupSeconds: 105,
    rlSeconds: 56,
    warmStart: { seconds: 98, steps: 629, cached: false },
    options: { ...DEFAULTS, lr: 0.001, rolloutResreq: "cpu=1,mem=2g", serviceModules: undefined, log: undefined, onEvent: () => undefined },
    trajectory: { step: 20, sample: picked!, decoder },
  };
}

/** The inner HTML of `<tag id="id">`; fails when it is absent. */
function byId(html: string, tag: string, id: string): string {
  const m = new RegExp(`<${tag} id="${id}"[^>]*>([\\s\\S]*?)</${tag}>`).exec(html);
  assert.ok(m, `<${tag} id="${id}"> is in the report`);
  return m[1]!;
}

/** The cell texts of the table row whose header cell is `name`. */
function cells(html: string, name: string): string[] {
  const m = new RegExp(`<tr[^>]*><(?:th|td)[^>]*>${name.replace(/[()]/g, "\\$&")}</(?:th|td)>([\\s\\S]*?)</tr>`).exec(html);
  assert.ok(m, `a row '${name}'`);
  return [...m[1]!.matchAll(/<td[^>]*>([\s\S]*?)<\/td>/g)].map((c) => c[1]!);
}

function report(f: ReportFacts, h: StepMetrics[]): { html: string; summary: string } {
  const dir = mkdtempSync(path.join(tmpdir(), "hearth-report-"));
  try {
    const r = writeReport(dir, h, f);
    return { html: readFileSync(r.file, "utf8"), summary: r.summary };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("step ticks are whole, round numbers; value ticks are 1, 2 or 5 × 10^k apart", () => {
  assert.deepEqual(niceTicks(1, 20, 8, true), [5, 10, 15, 20]);
  assert.deepEqual(niceTicks(0, 3, 8, true), [0, 1, 2, 3]);
  assert.deepEqual(niceTicks(0, 1, 5), [0, 0.2, 0.4, 0.6, 0.8, 1]);
  assert.deepEqual(niceTicks(0, 0.02, 4), [0, 0.005, 0.01, 0.015, 0.02]);
});

test("the warm start is timed from the run's events, and absent without one", () => {
  const seen: RunEvent[] = [];
  const clock = warmStartClock((e) => seen.push(e));
  clock.onEvent({ type: "executors", rollouts: 2, trainers: 2, reattached: false });
  assert.equal(clock.warmStart(), undefined);
  clock.onEvent({ type: "warmstart", step: 1, total: 3 });
  clock.onEvent({ type: "warmstart", step: 3, total: 3, nll: 0.1 });
  const w = clock.warmStart()!;
  assert.equal(w.steps, 3);
  assert.equal(w.cached, false);
  assert.ok(w.seconds >= 0);
  assert.equal(seen.length, 3, "every event is passed on");
  const cached = warmStartClock();
  cached.onEvent({ type: "warmstart", step: 2000, total: 2000, cached: true });
  assert.equal(cached.warmStart()!.cached, true);
});

test("every section of the report is there, with its numbers", () => {
  const { html, summary } = report(facts(), history());
  assert.ok(!/<script/i.test(html), "no scripts: the page is self-contained");
  assert.ok(!/(src|href)="(https?:)?\/\//.test(html), "nothing fetched");

  // Set-up (with the warm start) and RL apart.
  const time = byId(html, "section", "time");
  assert.deepEqual(cells(time, "set-up").slice(0, 2), ["105", "63.3%"]);
  assert.deepEqual(cells(time, "of which the warm start").slice(0, 2), ["98.0", "59.0%"]);
  assert.match(cells(time, "of which the warm start")[2]!, /629 supervised steps/);
  assert.deepEqual(cells(time, "RL").slice(0, 2), ["56.0", "33.7%"]);
  assert.deepEqual(cells(time, "finish").slice(0, 2), ["5.00", "3.0%"]);
  assert.deepEqual(cells(time, "whole command").slice(0, 2), ["166", "100.0%"]);
  assert.match(summary, /time: set-up 105 s incl\. warm start 98 s; RL 56 s; total 166 s/);

  // One figure per curve, by caption, with step ticks, value ticks, a line per series and a legend for several.
  const figures: Array<[string, string, string[]]> = [
    ["fig-em", "Held-out exact match (greedy)", []],
    ["fig-reward", "Train reward and exact match (mean per step)", ["reward", "exact match"]],
    ["fig-groups", "Prompt groups per step: kept (rewards differ) and dropped", ["kept", "dropped"]],
    ["fig-calls", "Searches per sample", ["train (sampled)", "held-out (greedy)"]],
    ["fig-phases", "Seconds per step, by phase", ["step", "rollout", "update", "publish", "sync"]],
    ["fig-util", "Utilisation (busy seconds over step time × executors)", ["rollouts", "trainers"]],
    ["fig-bytes", "Weight bytes per step: published and fetched", ["published (rank 0)", "fetched (all rollouts)"]],
    ["fig-kl", "KL to the reference and the sampler/trainer logprob gap", ["KL", "gap mean (right axis)", "gap max (right axis)"]],
  ];
  for (const [id, caption, legend] of figures) {
    const fig = byId(html, "figure", id);
    assert.ok(fig.startsWith(`<figcaption>${caption}</figcaption><svg`), `${id}: its caption, then the chart`);
    assert.equal(fig.match(/<path class="series"/g)?.length, Math.max(1, legend.length), `${id}: one line per series`);
    assert.deepEqual([...fig.matchAll(/class="legend">([^<]*)</g)].map((m) => m[1]), legend, `${id}: the legend`);
    const xticks = [...fig.matchAll(/class="xtick">(\d+)</g)].map((m) => Number(m[1]));
    assert.deepEqual(xticks, id === "fig-em" || id === "fig-calls" ? [0, 5, 10, 15, 20] : [5, 10, 15, 20], `${id}: steps on the x-axis`);
    assert.ok((fig.match(/text-anchor="end"[^>]*>[^<]+</g)?.length ?? 0) >= 3, `${id}: labelled y ticks`);
  }
  assert.match(byId(html, "figure", "fig-em"), />100%</);
  assert.match(byId(html, "figure", "fig-bytes"), />0.25 MiB<[\s\S]*>1 MiB</, "the bytes axis in round MiB");
  assert.match(byId(html, "figure", "fig-phases"), />6 s</, "the slowest step is on the seconds axis");

  // The per-phase table: mean, median, max seconds and the share of step time.
  const phases = byId(html, "section", "phases");
  assert.deepEqual(cells(phases, "rollout").slice(0, 4), ["1.50", "1.50", "2.00", "53.6%"]);
  assert.deepEqual(cells(phases, "sync").slice(0, 4), ["0.034", "0.020", "0.300", "(1.2%)"]);
  assert.deepEqual(cells(phases, "update").slice(0, 4), ["0.750", "0.750", "0.750", "26.8%"], "the update without the publication");
  assert.deepEqual(cells(phases, "publish").slice(0, 4), ["0.050", "0.050", "0.050", "1.8%"]);
  assert.deepEqual(cells(phases, "eval and other").slice(0, 4), ["0.500", "0.200", "3.20", "17.9%"]);
  assert.deepEqual(cells(phases, "step").slice(0, 4), ["2.80", "2.50", "6.00", "100.0%"]);

  // Bytes published and fetched per step.
  const weights = byId(html, "section", "weights");
  assert.deepEqual(cells(weights, "published").slice(0, 4), ["68 KiB", "40 KiB", "600 KiB", "1.3 MiB"]);
  assert.deepEqual(cells(weights, "fetched").slice(0, 4), ["192 KiB", "80 KiB", "1.2 MiB", "3.8 MiB"]);

  // KL, the logprob gap and utilisation: mean, median, last, max.
  const agreement = byId(html, "section", "agreement");
  assert.deepEqual(cells(agreement, "KL to the reference").slice(0, 4), ["0.0105", "0.0105", "0.0200", "0.0200"]);
  assert.deepEqual(cells(agreement, "logprob gap (mean)").slice(0, 4), ["1.00e-3", "1.00e-3", "1.00e-3", "1.00e-3"]);
  assert.equal(cells(agreement, "logprob gap (max)")[3], "0.2000");
  assert.deepEqual(cells(agreement, "rollout utilisation").slice(0, 4), ["90.0%", "90.0%", "90.0%", "90.0%"]);
  assert.deepEqual(cells(agreement, "trainer utilisation").slice(0, 4), ["30.0%", "30.0%", "30.0%", "30.0%"]);

  // One trajectory: its facts and its prompt, generated and retrieved spans.
  const traj = byId(html, "section", "trajectory");
  assert.deepEqual(cells(traj, "question"), ["where was ada born ?"]);
  assert.deepEqual(cells(traj, "answer"), ["oslo"]);
  assert.deepEqual(cells(traj, "reward"), ["1"]);
  const spans = [...traj.matchAll(/class="hearth-span hearth-(\w+)"[^>]*>([^<]*)</g)].map((m) => [m[1], m[2]]);
  assert.deepEqual(spans, [
    ["prompt", "where was ada born ?"],
    ["generated", "&lt;search&gt; ada &lt;/search&gt;"],
    ["observation", "&lt;information&gt; ada lives in oslo &lt;/information&gt;"],
    ["generated", "&lt;answer&gt; oslo &lt;/answer&gt;"],
  ]);
  assert.match(traj, /prompt: 5 tokens[\s\S]*generated \(trained on\): 6 tokens[\s\S]*retrieved passages \(masked out\): 6 tokens/);

  // The summary table and the options as rows, not one JSON line.
  assert.match(byId(html, "section", "summary"), /held-out EM 29\.0% → 95\.0% in 20 steps/);
  const options = byId(html, "section", "options");
  assert.deepEqual(cells(options, "lr"), ["<code>0.001</code>"]);
  assert.deepEqual(cells(options, "rolloutResreq"), ["<code>cpu=1,mem=2g</code>"]);
  assert.deepEqual(cells(options, "model"), ["<code>tiny</code>"]);
  const optionRows = [...options.matchAll(/<tbody>([\s\S]*?)<\/tbody>/g)].flatMap((t) => [...t[1]!.matchAll(/<tr><th>([^<]*)</g)].map((m) => m[1]));
  const set = Object.keys(DEFAULTS).filter((k) => DEFAULTS[k as keyof typeof DEFAULTS] !== undefined && typeof DEFAULTS[k as keyof typeof DEFAULTS] !== "function");
  assert.deepEqual(optionRows, set, "one row per set option, in order; functions and unset ones left out");
  assert.ok(!/onEvent|serviceModules|&quot;lr&quot;|"lr"/.test(html), "no function, unset option or JSON object of the options");
});

test("held-out EM per question category (the chain task's hops): a column per category in the summary, a line from start to end, and a curve per category", () => {
  const h = history().map((m) => (m.eval_em !== undefined ? { ...m, eval_em_by: m.step === 10 ? { "1 hop": 1, "2 hops": 0.8, "3 hops": 0.25 } : { "1 hop": 1, "2 hops": 0.9, "3 hops": 0.5 } } : m));
  const f: ReportFacts = { ...facts(), start: { ...facts().start, emBy: { "1 hop": 0.9, "2 hops": 0, "3 hops": 0.05 } }, final: { ...facts().final, emBy: { "1 hop": 1, "2 hops": 0.9, "3 hops": 0.5 } } };
  const { html, summary } = report(f, h);
  const lines = summary.split("\n");
  assert.equal(lines[0], "step  held-out EM   1 hop  2 hops  3 hops  searches/sample  train reward  elapsed");
  const row = (step: number) => lines.find((l) => l.startsWith(String(step).padStart(4)))!.split(/\s+/).filter(Boolean).slice(0, 5);
  assert.deepEqual(row(0), ["0", "29.0%", "90.0%", "0.0%", "5.0%"], "the evaluation before RL, by category");
  assert.deepEqual(row(10), ["10", "90.0%", "100.0%", "80.0%", "25.0%"]);
  assert.deepEqual(row(20), ["20", "95.0%", "100.0%", "90.0%", "50.0%"]);
  assert.match(summary, /^held-out EM by category: 1 hop 90\.0% → 100\.0%; 2 hops 0\.0% → 90\.0%; 3 hops 5\.0% → 50\.0%$/m);
  const fig = byId(html, "figure", "fig-em-by");
  assert.ok(fig.startsWith("<figcaption>Held-out exact match by question category (greedy)</figcaption><svg"));
  assert.deepEqual([...fig.matchAll(/class="legend">([^<]*)</g)].map((m) => m[1]), ["1 hop", "2 hops", "3 hops"], "a curve per category");
  assert.equal(fig.match(/<path class="series"/g)?.length, 3);
  assert.match(byId(html, "section", "summary"), /held-out EM by category: 1 hop 90\.0% → 100\.0%/, "the report's summary says it too");
  // Without categories (the easy task, HotpotQA): no such column, line or figure.
  const plain = report(facts(), history());
  assert.ok(!/fig-em-by/.test(plain.html));
  assert.ok(!/by category/.test(plain.summary));
  assert.equal(plain.summary.split("\n")[0], "step  held-out EM  searches/sample  train reward  elapsed");
});

test("a report without a warm start, samples or the newer metrics says what is missing", () => {
  const old = history().map((m) => {
    const { publish_s: _p, sync_s: _s, kl: _k, logprob_gap: _g, logprob_gap_max: _gm, rollout_util: _r, trainer_util: _t, ...rest } = m;
    return rest;
  });
  const f: ReportFacts = { ...facts(), warmStart: undefined, trajectory: undefined, setupSeconds: 7, rlSeconds: 56, seconds: 70 };
  const { html, summary } = report(f, old);
  const time = byId(html, "section", "time");
  assert.match(cells(time, "warm start")[2]!, /none in this command/);
  assert.doesNotMatch(summary, /warm start/);
  const phases = byId(html, "section", "phases");
  assert.deepEqual(cells(phases, "sync").slice(0, 1), ["not measured"]);
  assert.deepEqual(cells(phases, "publish").slice(0, 1), ["not measured"]);
  assert.deepEqual(cells(phases, "update").slice(0, 4), ["0.800", "0.800", "0.800", "28.6%"], "without publish times, the whole train call");
  assert.deepEqual(cells(byId(html, "section", "agreement"), "KL to the reference"), ["not reported", "k3 estimator, per generated token"]);
  assert.match(byId(html, "figure", "fig-kl"), /no data/);
  assert.match(byId(html, "section", "trajectory"), /no step's samples/);
  const none = report({ ...f, final: f.start }, []);
  assert.match(byId(none.html, "figure", "fig-em"), /<svg/, "no steps: the starting evaluation is still drawn");
  assert.match(byId(none.html, "figure", "fig-phases"), /no data/);
});

test("the report renders in headless Chromium", { skip: existsSync(CHROMIUM) ? false : `no ${CHROMIUM}` }, async () => {
  const outDir = path.join(REPO_ROOT, "test-output", "searchr1");
  mkdirSync(outDir, { recursive: true });
  const { file } = writeReport(outDir, history(), facts());
  const png = path.join(outDir, "report.png");
  rmSync(png, { force: true });
  await screenshot(file, png, 1240, 4100);
  assertDrawn(png);
});
