// The Search-R1 notebook views and interactive helpers on hand-made scored
// samples (no executors): the trajectory table, spans of one trajectory,
// step summaries, rescoring, the bounded step store, the training loop's
// stop/failure behaviour, and the plots' bundles.
import assert from "node:assert/strict";
import { test } from "node:test";
import { JUPYTER_DISPLAY, PLOTLY_MIME, toMimeBundle } from "../../sdk/notebook/index.js";
import type { ScoredSample } from "../../sdk/rl/types.js";
import { StepStore, regroup, trainLoop } from "../../sdk/rl/run/interactive.js";
import { terminalProgress, warmupProgress } from "../../sdk/rl/run/events.js";
import { plot } from "../../sdk/rl/notebook/plots.js";
import { emReward, f1Reward, type RewardFn } from "../../sdk/envs/searchr1/reward.js";
import type { StepMetrics, StepResult } from "../../sdk/rl/run/run.js";
import { TrajectoryView, rescoreSamples, trajectoryRows, trajectorySpans, trajectoryTable } from "../../sdk/rl/notebook/views.js";
import { metricsView, withStepDisplay } from "../../sdk/rl/report/step-summary.js";
import { HearthError } from "../../sdk/errors/index.js";
import { RewardError } from "../../sdk/rl/errors.js";

const VOCAB = ["[UNK]", "where", "was", "ada", "born", "?", "<search>", "ada", "</search>", "<information>", "ada", "lives", "in", "oslo", "</information>", "<answer>", "oslo", "norway", "</answer>", "paris"];
const decoder = { decode: (ids: ArrayLike<number>) => Array.from(ids, (i) => VOCAB[i] ?? "?").join(" ") };

/** Token offsets: prompt [0, 5) · generated search [5, 8) · retrieved [8, 14) · generated answer [14, end). */
function sample(question: string, golds: string[], answerIds: number[], extra: Partial<ScoredSample> = {}): ScoredSample {
  const ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ...answerIds, 18];
  const mask = ids.map((_, k) => (k < 5 || (k >= 8 && k <= 13) ? 0 : 1));
  const response = ids.slice(5).map((i) => VOCAB[i]).join(" ");
  const answer = answerIds.map((i) => VOCAB[i]).join(" ");
  return {
    itemId: question,
    group: 0,
    promptLength: 5,
    tokens: Int32Array.from(ids),
    mask: Uint8Array.from(mask),
    logprobs: new Float32Array(ids.length),
    response: response.replace(/ <\/answer>$/, "</answer>").replace("<answer> ", "<answer>"),
    calls: ["ada"],
    finish: "answer",
    policyVersion: 0,
    question,
    golds,
    answer,
    reward: 0,
    advantage: 0,
    kept: false,
    ...extra,
  };
}

/** Two groups of 4: "where was ada born" (gold "oslo norway", kept) and "capital" (gold "paris", all right: dropped). */
function step(): ScoredSample[] {
  const g1 = [[16], [16, 17], [19], [16, 17]].map((a) => sample("where was ada born ?", ["oslo norway"], a));
  const g2 = [[19], [19], [19], [19]].map((a) => sample("capital ?", ["paris"], a, { group: 1 }));
  const groups = [g1, g2].map((g) => ({ question: g[0]!.question, golds: g[0]!.golds, samples: g }));
  return rescoreSamples(1, groups.flatMap((g) => g.samples), emReward, 4).after as ScoredSample[];
}

function metrics(n: number): StepMetrics {
  return { step: n, reward_mean: n / 10, em: n / 20, searches_per_sample: 1, groups_kept: 1, groups_dropped: 1, samples_trained: 4, tokens: 100, rollout_s: 0.1, update_s: 0.1, publish_bytes: 10, step_s: 0.2, weights_version: n, sync_bytes: 10, sync_executors: 2, ...(n % 2 === 0 ? { eval_em: 0.5, eval_searches: 1.5 } : {}) };
}

test("the trajectory table has the issue's columns, renders arquero HTML and aligned text", () => {
  const samples = step();
  const rows = trajectoryRows(samples);
  assert.deepEqual(Object.keys(rows[0]!), ["i", "question", "golds", "response", "calls", "answer", "reward", "advantage", "kept", "tokens", "masked"]);
  assert.equal(rows[1]!.answer, "oslo norway");
  assert.equal(rows[1]!.reward, 1, "exact match on the second sample");
  assert.equal(rows[0]!.tokens, 17);
  assert.equal(rows[0]!.masked, 11, "prompt (5) and retrieved (6) tokens are masked");
  const bundle = toMimeBundle(trajectoryTable(samples, { step: 3 }));
  assert.match(bundle["text/html"] as string, /<table[\s\S]*<th[^>]*>question<\/th>[\s\S]*oslo norway/);
  assert.match(bundle["text/plain"], /^step 3: 8 trajectories\ni\s+question/);
  const cut = trajectoryTable(samples, { responseChars: 20 }).rows()[0]!.response as string;
  assert.equal(cut.length, 20);
  assert.ok(cut.endsWith("…") && samples[0]!.response.startsWith(cut.slice(0, 19)));
  // The calls column in the environment's words, in its place.
  const named = trajectoryTable(samples, { words: { call: "search", calls: "searches", observation: "retrieved passage" } }).rows()[0]!;
  assert.deepEqual(Object.keys(named), ["i", "question", "golds", "response", "searches", "answer", "reward", "advantage", "kept", "tokens", "masked"]);
  assert.equal(named.searches, 1);
});

test("one trajectory is split into prompt, generated and retrieved spans, coloured apart in HTML", () => {
  const s = step()[1]!;
  const spans = trajectorySpans(s, decoder);
  assert.deepEqual(spans.map((x) => [x.kind, x.start, x.end]), [["prompt", 0, 5], ["generated", 5, 8], ["observation", 8, 14], ["generated", 14, 18]]);
  assert.equal(spans[2]!.text, "<information> ada lives in oslo </information>");
  const view = new TrajectoryView(s, decoder, 1, 3);
  assert.deepEqual(view.counts(), { prompt: 5, generated: 7, observation: 6 });
  const b = view[JUPYTER_DISPLAY]();
  assert.match(b["text/plain"], /^trajectory 1 of step 3: reward 1, advantage 1\.000/);
  assert.match(b["text/plain"], /\[observation 8-14\] <information> ada lives in oslo <\/information>/);
  const html = b["text/html"] as string;
  assert.equal(html.match(/class="hearth-span hearth-generated"/g)?.length, 2);
  assert.match(html, /hearth-observation"[^>]*>&lt;information&gt; ada lives in oslo &lt;\/information&gt;</, "retrieved text is escaped");
});

test("a step result displays as a compact card through a non-enumerable method; every metric is one click away", () => {
  const m: StepMetrics = { ...metrics(4), groups_kept: 6, groups_dropped: 10, rollout_s: 1.5, sync_s: 0.02, update_s: 0.8, publish_s: 0.05, step_s: 3.2, sync_bytes: 2 * 40 * 1024, publish_bytes: 40 * 1024, weights_version: 5, kl: 0.0012, logprob_gap: 0.001, logprob_gap_max: 0.004, eval_em_by: { "1 hop": 1, "2 hops": 0.25 } };
  const r = withStepDisplay({ metrics: m, trajectories: [], samples: step() });
  assert.deepEqual(Object.keys(r), ["metrics", "trajectories", "samples"], "the result's own keys are unchanged");
  const b = toMimeBundle(r);
  // Text: a few lines, not a row per metric.
  assert.deepEqual(b["text/plain"].split("\n"), [
    "step 4: 8 samples, 4 trained on",
    "reward 0.400  ·  EM 20.0%  ·  searches / sample 1.00  ·  groups kept 6 / 16",
    "time 3.20 s: rollout 1.50 (sync 0.020) · update 0.750 · publish 0.050 · other 0.900",
    "sync 80 KiB to 2 rollout(s) (published 40 KiB, weights v5)",
    "KL 1.2e-3 · logprob gap 1.0e-3 (max 4.0e-3)",
    "held-out EM 50.0% (1 hop 100.0% · 2 hops 25.0%), searches 1.50",
    `(all ${Object.values(m).filter((v) => typeof v === "number").length} metrics: result.metrics, or metricsView(result.metrics))`,
  ]);
  const html = b["text/html"] as string;
  assert.match(html, /^<div class="hearth-step-card"/);
  const tiles = [...html.matchAll(/class="hearth-card-tile" data-key="([^"]+)"[\s\S]*?class="hearth-card-value"[^>]*>([^<]*)</g)].map((t) => [t[1], t[2]]);
  assert.deepEqual(tiles, [["reward", "0.400"], ["EM", "20.0%"], ["searches / sample", "1.00"], ["groups kept", "6 / 16"]]);
  const phases = [...html.matchAll(/data-phase="(\w+)" data-seconds="([\d.]+)"[^>]*width:([\d.]+)%/g)].map((p) => [p[1], Number(p[2]), Number(p[3])]);
  assert.deepEqual(phases.map((p) => p[0]), ["rollout", "update", "publish", "other"], "a bar segment per phase");
  assert.deepEqual(phases.map((p) => Number((p[1] as number).toFixed(6))), [1.5, 0.75, 0.05, 0.9], "update without its publication; other is the rest of the step");
  assert.ok(Math.abs(phases.reduce((n, p) => n + (p[2] as number), 0) - 100) < 0.05, "the segments fill the bar");
  // Every metric, one click away: a <details> with the full table, a row per number in metrics.jsonl order.
  const details = /<details class="hearth-all-metrics"[^>]*><summary[^>]*>all (\d+) metrics<\/summary>([\s\S]*)<\/details>/.exec(html);
  assert.ok(details, "the full metrics behind a click");
  const rows = [...details[2]!.matchAll(/<tr><td[^>]*>([^<]*)<\/td><td[^>]*>([^<]*)<\/td><\/tr>/g)].map((x) => x[1]);
  assert.deepEqual(rows, Object.keys(m).filter((k) => typeof m[k as keyof StepMetrics] === "number"));
  assert.equal(Number(details[1]), rows.length);
  // A step that trained nothing says so instead of showing a KL.
  const idle = toMimeBundle(withStepDisplay({ metrics: metrics(3), trajectories: [], samples: [] }));
  assert.match(idle["text/plain"], /^KL and logprob gap: no sample was trained on$/m);
  assert.doesNotMatch(idle["text/plain"], /held-out EM/, "no evaluation on this step");
  // ...and the same table is one call away.
  assert.match(toMimeBundle(metricsView(m))["text/plain"], /^step 4: all metrics\n[\s\S]*reward_mean\s+0\.4/);
});

test("rescoring with F1 changes partial matches, recomputes advantages and keeps the samples' order", () => {
  const before = step();
  const view = rescoreSamples(1, before, f1Reward, 4);
  const after = view.after;
  assert.equal(after.length, before.length);
  assert.ok(Math.abs(after[0]!.reward - 2 / 3) < 1e-9, "'oslo' against 'oslo norway' gets F1 2/3");
  assert.equal(after[1]!.reward, 1);
  assert.equal(view.changed, 1);
  for (const s of after) assert.ok(Number.isFinite(s.advantage));
  assert.ok(after[0]!.advantage !== before[0]!.advantage, "advantages follow the new rewards");
  assert.deepEqual(after.map((s) => s.response), before.map((s) => s.response));
  assert.match(view[JUPYTER_DISPLAY]()["text/plain"], /^rescored step 1: 1 of 8 rewards changed/);
});

test("regroup splits by prompt and by group size, so the same question twice stays two groups", () => {
  const a = step().slice(0, 4);
  assert.deepEqual(regroup([...a, ...a], 4).map((g) => g.length), [4, 4]);
  assert.deepEqual(regroup(step()).map((g) => g.length), [4, 4]);
});

test("a reward that throws or returns NaN is a RewardError naming the sample; the stored step is unchanged", () => {
  const store = new StepStore(3);
  const r: StepResult = { metrics: metrics(1), trajectories: [], samples: step() };
  store.add(r);
  const rewards = r.samples.map((s) => s.reward);
  const nan: RewardFn = () => NaN;
  const boom: RewardFn = () => {
    throw new Error("boom");
  };
  assert.throws(() => rescoreSamples(1, store.get(1).samples, nan, 4), (e: Error) => e instanceof RewardError && e.sample === 0 && e.question === "where was ada born ?" && /returned NaN for sample 0 of 'where was ada born \?'/.test(e.message));
  assert.throws(() => rescoreSamples(1, store.get(1).samples, boom, 4), (e: Error) => e instanceof RewardError && e.sample === 0 && /threw on sample 0 .*boom/.test(e.message));
  assert.throws(() => rescoreSamples(1, store.get(1).samples, "f1" as unknown as RewardFn), HearthError);
  assert.deepEqual(store.get(1).samples.map((s) => s.reward), rewards);
});

test("the step store keeps the last N results and names what it holds", () => {
  const store = new StepStore(3);
  assert.throws(() => store.get(), /no step has run yet/);
  const dropped: number[] = [];
  for (let n = 1; n <= 5; n++) dropped.push(...store.add({ metrics: metrics(n), trajectories: [], samples: [] }).map((r) => r.metrics.step));
  assert.deepEqual(store.steps(), [3, 4, 5]);
  assert.deepEqual(dropped, [1, 2], "add hands back the results that left the window, oldest first");
  assert.equal(store.get().metrics.step, 5);
  assert.throws(() => store.get(1), /step 1 is not held: this run keeps the last 3 step results \(--keep-steps 3; held: steps 3–5\); it left the inspection window/);
  assert.throws(() => store.get(9), /step 9 is not held: .*; no such step has run/);
  assert.throws(() => new StepStore(0), HearthError);
});

test("trainLoop stops between steps on abort and ends with a failing step's error", async () => {
  const lines: string[] = [];
  const ac = new AbortController();
  let n = 0;
  const ok = async (): Promise<StepResult> => ({ metrics: metrics(++n), trajectories: [], samples: [] });
  const done = await trainLoop(5, async () => {
    const r = await ok();
    if (n === 2) ac.abort();
    return r;
  }, { signal: ac.signal, progress: false, onStep: (r) => lines.push(String(r.metrics.step)) });
  assert.deepEqual(done.map((m) => m.step), [1, 2], "the step in flight finished; no step started after the abort");
  assert.deepEqual(lines, ["1", "2"]);

  let calls = 0;
  await assert.rejects(
    trainLoop(3, async () => {
      if (++calls === 2) throw new HearthError("a step is already running on this run; await it before starting another");
      return ok();
    }, { progress: false }),
    /already running/,
  );
  assert.equal(calls, 2, "no step after the failing one");
  await assert.rejects(trainLoop(-1, ok), /whole number of steps/);
});

test("warmupProgress advances on create's typed events, the warm start step by step", () => {
  const w = warmupProgress({ next: () => undefined });
  w.onEvent({ type: "task", describe: "synthetic", train: 10, heldOut: 2 });
  assert.equal(w.bar.value, 1);
  w.onEvent({ type: "executors", rollouts: 2, trainers: 2, reattached: false });
  assert.equal(w.bar.value, 2);
  w.onEvent({ type: "warmstart", step: 10, total: 30, nll: 1.5 });
  assert.equal(w.bar.value, 2, "the warm start in progress");
  assert.match(w.bar.view().note, /warm start 10\/30, token NLL 1\.500/);
  w.onEvent({ type: "warmstart", step: 30, total: 30, nll: 0.2 });
  assert.equal(w.bar.value, 3);
  w.onEvent({ type: "published", version: 1, bytes: 1000, kind: "full" });
  assert.equal(w.bar.value, 4);
  const again = warmupProgress({ next: () => undefined });
  again.onEvent({ type: "executors", rollouts: 2, trainers: 2, reattached: true });
  assert.equal(again.bar.value, 4, "a reattached run is warm at once");
});

test("terminalProgress writes plain lines, one per tenth of the warm start, when the stream is not a TTY", () => {
  const lines: string[] = [];
  const stream = { isTTY: false, write: (s: string) => (lines.push(s), true) } as unknown as NodeJS.WriteStream;
  const on = terminalProgress(stream);
  for (let i = 1; i <= 100; i++) on({ type: "warmstart", step: i, total: 100, nll: 1 / i });
  assert.equal(lines.length, 10);
  assert.equal(lines[0], "warm start 10/100: token NLL 0.100\n");
  assert.equal(lines.at(-1), "warm start 100/100: token NLL 0.010\n");
});

test("plots: curves from history (held-out points where evaluated), advantage and length histograms", () => {
  const history = [1, 2, 3, 4].map(metrics);
  const em = plot.curve(history, "em")[JUPYTER_DISPLAY]();
  const doc = em[PLOTLY_MIME] as { data: Array<{ name: string; x: number[]; y: number[] }> };
  assert.deepEqual(doc.data.map((t) => [t.name, t.x]), [["train em", [1, 2, 3, 4]], ["held-out em", [2, 4]]]);
  assert.ok((em["text/html"] as string).includes("Plotly.newPlot"));
  assert.deepEqual(plot.curve(history, "reward").data.map((t) => t.y), [[0.1, 0.2, 0.3, 0.4]]);
  assert.throws(() => plot.curve(history, "loss"), /unknown metric "loss"; use em, reward, calls \(searches\)/, "a field no step has");
  // The environment's calls, by the generic name or its own word, with held-out points; any numeric field.
  for (const name of ["calls", "searches"]) assert.deepEqual(plot.curve(history, name).data.map((t) => [t.name, t.y]), [[`train ${name}`, [1, 1, 1, 1]], [`held-out ${name}`, [1.5, 1.5]]]);
  assert.deepEqual(plot.curve(history, "tokens").data.map((t) => t.y), [[100, 100, 100, 100]]);
  const samples = step();
  const adv = plot.advantages({ metrics: metrics(7), samples });
  assert.match(adv.summary(), /^Figure "step 7: advantages": kept groups \(histogram, 4 points\), dropped groups .*\(histogram, 4 points\)/);
  const len = plot.lengths(samples);
  assert.deepEqual(len.data.map((t) => t.x), [[6, 7, 6, 7, 6, 6, 6, 6], samples.map(() => 11)]);
});
