// Runs notebooks/01-search-r1.ipynb with Debian's nbclient through the hearth
// kernel against a head and agent of its own (a real Search-R1 run with the
// tiny model, across a kernel restart), and checks from the executed
// outputs what each section shows (the notebook itself asserts nothing: it
// reads as a tutorial): no error outputs, the expected MIME types (HTML
// tables, plotly figures, progress bars updated in place), the starting
// policy it says it loaded (the shipped one; no warm start made), the step
// card and the metrics behind its click, the values in its tables, the same
// executors before and after the restart, and that its HTML export draws the
// plots in headless Chromium.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { readManifest } from "../../sdk/rl/run/warm-start.js";
import { shippedPolicy } from "../../sdk/envs/searchr1/recipes/chain.js";
import { REPO_ROOT } from "./bridge.js";
import { cellHtml, cellText, cardMetrics, htmlRows, textRows } from "./nbclient.js";
import { assertDrawn, useNotebookRig } from "./notebook-rig.js";
import { CHROMIUM, exportHtml, renderedDom, screenshot } from "./render.js";

const PLOTLY = "application/vnd.plotly.v1+json";

const rig = useNotebookRig("sr1-nb-agent", "hearth-nb01-home-");
let executed: string | undefined;

/** A rescore summary's numbers (its text table: metric, value). */
function summaryMetrics(text: string): Record<string, number> {
  return Object.fromEntries(textRows(text, 1).map((r) => [r.key!, Number(r.value)]));
}


test("01-search-r1.ipynb trains end to end under nbclient, across a kernel restart: tables, trajectory spans, figures, progress bars, the values each section shows", async () => {
  const outFile = path.join(rig.home, "01-search-r1.out.ipynb");
  const result = await rig.run(path.join(REPO_ROOT, "notebooks/01-search-r1.ipynb"), outFile, 540_000, 240);
  const rich = result.rich;
  const html = (re: RegExp) => rich.filter((r) => r.mime.includes("text/html") && re.test(r.text));

  const warmup = html(/^warm-up \[/);
  assert.equal(warmup.length, 1, "the warm-up bar is one output, updated in place");
  assert.match(warmup[0]!.text, /4\/4 100%/);
  // It started from the shipped policy, as the note under the bar says, and made no warm start of its own.
  const setup = result.cells.find((c) => c.source.startsWith("import { homedir }"))!;
  const stdout = setup.outputs.filter((o) => o.output_type === "stream" && o.name === "stdout").map((o) => o.text).join("");
  const shipped = readManifest(shippedPolicy());
  assert.match(stdout, new RegExp(`^note: starting policy: the shipped ${shippedPolicy().replace(/[.]/g, "\\.")} \\(recipe tiny-chain ${shipped.hash}, ${shipped.steps} supervised steps\\)$`, "m"), stdout);
  assert.doesNotMatch(stdout, /warm start/i, "no warm start was reported");
  assert.ok(!existsSync(path.join(rig.home, "bootstrap")), "no warm start was made (a run's own warm start is cached under HEARTH_HOME/bootstrap)");
  const train = html(/^train \[/);
  assert.equal(train.length, 2, "each train(n) shows one bar, updated in place (before and after the restart)");
  assert.match(train[0]!.text, /40\/40 100% .*step 41: reward/);
  assert.match(train[1]!.text, /2\/2 100% .*step 45: reward/);

  assert.equal(html(/^step 1: 128 samples/).length, 1, "the first step's summary");
  assert.equal(html(/^step 41: 128 samples/).length, 1, "the last trained step's summary");
  assert.equal(html(/^step 1: 128 trajectories\ni\s+question\s+golds\s+response/).length, 1, "the trajectory table");
  assert.equal(html(/^trajectory \d+ of step 1: reward/).length, 1, "one trajectory with its spans");
  assert.equal(html(/^rescored step 1: \d+ of 128 rewards changed/).length, 1, "the F1 rescore");
  assert.equal(html(/^held-out evaluation/).length, 1, "the evaluation table");

  const figures = rich.filter((r) => r.mime.includes(PLOTLY));
  assert.deepEqual(
    figures.map((f) => /^Figure "([^"]*)"/.exec(f.text)?.[1]),
    ["step 1: advantages", "mean reward", "exact match", "searches per sample", "step 41: lengths"],
    "advantages, three curves and lengths are plotly figures",
  );
  for (const f of figures) assert.ok(f.mime.includes("text/html"), "each figure has an HTML fallback");
  assert.match(figures[1]!.text, /train reward \(scatter, 41 points\)/);

  // One step: a card that reads at a glance, every metric a number one click away, 16 prompt groups kept or dropped, 128 samples.
  const [card] = cellHtml(result.cells, "const first = await run.step();");
  assert.match(card!, /^<div class="hearth-step-card"/);
  assert.deepEqual([...card!.matchAll(/class="hearth-card-tile" data-key="([^"]+)"/g)].map((m) => m[1]), ["reward", "EM", "searches / sample", "groups kept"]);
  assert.match(html(/^step 1: 128 samples/)[0]!.text, /^time \d+\.\d+ s: rollout [\d.]+ \(sync [\d.]+\) · update [\d.]+ · publish [\d.]+ · other [\d.]+$/m);
  assert.match(html(/^step 1: 128 samples/)[0]!.text, /^KL [\d.e-]+ · logprob gap [\d.e-]+ \(max [\d.e-]+\)$/m, "step 1 trained: KL and the gap are shown");
  const first = cardMetrics(card!);
  for (const k of ["reward_mean", "em", "searches_per_sample", "groups_kept", "groups_dropped", "samples_trained", "tokens", "rollout_s", "update_s", "step_s"]) {
    assert.ok(Number.isFinite(first[k]), `step 1 shows ${k} as a number (${first[k]})`);
  }
  assert.equal(first.step, 1);
  assert.equal(first.groups_kept! + first.groups_dropped!, 16);
  // From the shipped starting policy, rewards differ within groups from the first step on.
  assert.ok(first.groups_kept! > 0, `step 1 keeps groups (${first.groups_kept} of 16): the starting policy earns reward`);
  assert.match(
    html(/^trajectory \d+ of step 1: reward/)[0]!.text,
    /^trajectory \d+ of step 1: reward 1(\.0+)?, .*, [1-9]\d* search(es)?, finish answer/,
    "the trajectory view shows a sample that searched and answered right",
  );
  // The reward rises across the notebook's training cells (steps 1–41 of metrics.jsonl).
  const rewards = readFileSync(path.join(rig.home, "runs", "search-r1-notebook", "metrics.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { step: number; reward_mean: number }).filter((m) => m.step <= 41).map((m) => m.reward_mean);
  const meanOf = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  assert.ok(meanOf(rewards.slice(-5)) > meanOf(rewards.slice(0, 5)), `the mean reward of steps 37–41 (${meanOf(rewards.slice(-5)).toFixed(3)}) is above that of steps 1–5 (${meanOf(rewards.slice(0, 5)).toFixed(3)})`);

  // The trajectory table: 128 rows with every column.
  const [trajectories] = cellText(result.cells, "run.trajectories()");
  assert.deepEqual(Object.keys(textRows(trajectories!, 1)[0]!), ["i", "question", "golds", "response", "searches", "answer", "reward", "advantage", "kept", "tokens", "masked"]);
  assert.match(trajectories!, /^step 1: 128 trajectories/);

  // F1 never scores below exact match, so the mean cannot fall.
  const rescore = summaryMetrics(html(/^rescored step 1:/)[0]!.text);
  assert.ok(rescore["reward mean after"]! >= rescore["reward mean before"]!, JSON.stringify(rescore));

  const [evaluation] = cellText(result.cells, "const evaluation");
  const evalRows = textRows(evaluation!, 1);
  assert.deepEqual(evalRows.map((r) => r.questions), ["all", "1 hop", "2 hops", "3 hops"], "overall, then per hop count");
  assert.equal(evalRows[0]!.held_out, "40");
  assert.equal(evalRows.slice(1).reduce((n, r) => n + Number(r.held_out), 0), 40, "the hop counts split the 40");

  // Error messages are longer than the text table's cells: read the HTML table.
  const [misuse] = cellHtml(result.cells, "const outcome");
  const outcomes = Object.fromEntries(htmlRows(misuse!).map((r) => [r.attempt!, r.outcome!]));
  assert.match(outcomes["a second step while one runs"]!, /a step is already running/);
  assert.match(outcomes["a step whose reward returns NaN"]!, /^RewardError: .*returned NaN for sample 0 of '.*' at step \d+/);
  assert.match(outcomes["a rescore whose reward throws"]!, /threw on sample 0/);
  assert.match(outcomes["the next step, F1 again"]!, /^ran as step 43; 43 steps in history/, "the failed step left no trace (else this would be step 44)");

  // Across the restart: a new kernel (its count starts again), the same executors, the run reattached at step 43.
  const [before] = cellText(result.cells, "const executorsNow");
  assert.match(before!, /^before the restart: step 43/);
  const restarted = result.cells.find((c) => c.tags.includes("restart-kernel-before"));
  assert.ok(restarted, "a cell runs after a kernel restart");
  assert.equal(restarted.execution_count, 1, "the cell after the restart ran in a fresh kernel");
  const after = restarted.outputs.filter((o) => o.mime).map((o) => o.text ?? "")[0]!;
  assert.match(after, /^after the restart: reattached at step 43 with 43 steps of history/, "the run was found as it was, by name");
  const executorsOf = (text: string) => textRows(text, 1).map((r) => `${r.service} ${r.executor} ${r.pid}`).sort();
  assert.equal(executorsOf(before!).length, 4, "2 rollout executors and 2 trainers");
  assert.deepEqual(executorsOf(after), executorsOf(before!), "the same executors, same processes, answer after the restart");
  const continued = cellText(result.cells, "await run.train(2);");
  assert.ok(continued.some((t) => /^step 45: 128 samples/.test(t)), "training continues from step 43");
  executed = outFile;
});

test("the executed 01-search-r1 exported to HTML draws its plots and trajectory spans offline in headless Chromium", { skip: existsSync(CHROMIUM) ? false : `no ${CHROMIUM}` }, async () => {
  assert.ok(executed, "the notebook ran (previous test)");
  const outDir = path.join(REPO_ROOT, "test-output", "kernel");
  mkdirSync(outDir, { recursive: true });
  const exported = await exportHtml(executed, outDir);
  const dom = await renderedDom(exported);
  assert.equal(dom.match(/class="hearth-figure[^"]*js-plotly-plot/g)?.length, 5, "plotly.js (inlined) drew the five figures");
  assert.match(dom, /class="main-svg"/);
  assert.match(dom, /class="hearth-span hearth-generated"/, "the trajectory's generated spans are in the export");
  assert.match(dom, /<progress value="40" max="40"/, "the training bar's final state is in the export");
  const png = path.join(outDir, "01-search-r1.png");
  await screenshot(exported, png, 1200, 6000);
  assertDrawn(png);
});
