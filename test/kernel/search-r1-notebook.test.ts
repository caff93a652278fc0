// Runs notebooks/01-search-r1.ipynb with Debian's nbclient through the hearth
// kernel against a head and agent of its own (a real Search-R1 run with the
// tiny model), and checks: no error outputs, the expected MIME types (HTML
// tables, plotly figures, progress bars updated in place), what the notebook
// asserts in its own cells, and that its HTML export draws the plots in
// headless Chromium.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startCluster, type TestCluster } from "../helpers/cluster.js";
import { REPO_ROOT, TempKernelspec } from "./bridge.js";
import { errorOutputs, runNotebook } from "./nbclient.js";
import { CHROMIUM, exportHtml, pngStats, renderedDom, screenshot } from "./render.js";

const PLOTLY = "application/vnd.plotly.v1+json";

let cluster: TestCluster;
let spec: TempKernelspec;
let home: string;
let executed: string | undefined;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "sr1-nb-agent", cpus: 4, mem: "8g" }] });
  spec = new TempKernelspec();
  home = mkdtempSync(path.join(tmpdir(), "hearth-nb01-home-"));
});

after(async () => {
  await cluster?.stop();
  spec?.remove();
  if (home) rmSync(home, { recursive: true, force: true });
});

test("01-search-r1.ipynb trains end to end under nbclient: tables, trajectory spans, figures, progress bars, its own asserts", async () => {
  const outFile = path.join(home, "01-search-r1.out.ipynb");
  const result = await runNotebook(path.join(REPO_ROOT, "notebooks/01-search-r1.ipynb"), spec, { HEARTH_HEAD: cluster.endpoint, HEARTH_HOME: home }, outFile, 420_000, 240);
  console.log(`# 01-search-r1.ipynb executed in ${result.elapsed_s.toFixed(1)} s`);

  assert.deepEqual(errorOutputs(result.cells), [], "no cell fails (the notebook's own asserts included)");
  const stderr = result.cells.flatMap((c) => c.outputs.filter((o) => o.output_type === "stream" && o.name === "stderr").map((o) => o.text));
  assert.deepEqual(stderr, [], "no cell writes to stderr");
  for (const c of result.cells) assert.ok(c.execution_count !== null, `cell ${c.index} ran`);

  const rich = result.cells.flatMap((c) => c.outputs.filter((o) => o.mime).map((o) => ({ cell: c.index, mime: o.mime!, text: o.text ?? "" })));
  for (const r of rich) assert.ok(r.mime.includes("text/plain"), `every bundle has text/plain (cell ${r.cell})`);
  const html = (re: RegExp) => rich.filter((r) => r.mime.includes("text/html") && re.test(r.text));

  const warmup = html(/^warm-up \[/);
  assert.equal(warmup.length, 1, "the warm-up bar is one output, updated in place");
  assert.match(warmup[0]!.text, /4\/4 100%/);
  const train = html(/^train \[/);
  assert.equal(train.length, 1, "the training bar is one output, updated in place");
  assert.match(train[0]!.text, /20\/20 100% .*step 21: reward/);

  assert.equal(html(/^step 1: 32 samples/).length, 1, "the first step's summary");
  assert.equal(html(/^step 21: 32 samples/).length, 1, "the last trained step's summary");
  assert.equal(html(/^step 1: 32 trajectories\ni\s+question\s+golds\s+response/).length, 1, "the trajectory table");
  assert.equal(html(/^trajectory \d+ of step 1: reward/).length, 1, "one trajectory with its spans");
  assert.equal(html(/^rescored step 1: \d+ of 32 rewards changed/).length, 1, "the F1 rescore");
  assert.equal(html(/^held-out evaluation/).length, 1, "the evaluation table");

  const figures = rich.filter((r) => r.mime.includes(PLOTLY));
  assert.deepEqual(
    figures.map((f) => /^Figure "([^"]*)"/.exec(f.text)?.[1]),
    ["step 1: advantages", "mean reward", "exact match", "searches per sample", "step 21: lengths"],
    "advantages, three curves and lengths are plotly figures",
  );
  for (const f of figures) assert.ok(f.mime.includes("text/html"), "each figure has an HTML fallback");
  assert.match(figures[1]!.text, /train reward \(scatter, 21 points\)/);
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
  assert.match(dom, /<progress value="20" max="20"/, "the training bar's final state is in the export");
  const png = path.join(outDir, "01-search-r1.png");
  await screenshot(exported, png, 1200, 6000);
  const stats = pngStats(png);
  console.log(`# screenshot ${png}: ${stats.width}x${stats.height}, ${(stats.nonWhite * 100).toFixed(1)}% non-white, ${stats.colors} colors`);
  assert.ok(stats.nonWhite > 0.02 && stats.colors > 50, `the screenshot is not blank: ${JSON.stringify(stats)}`);
});
