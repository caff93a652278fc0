// Runs notebooks/02-runtime-tour.ipynb with Debian's nbclient through the
// hearth kernel against a head and agent of its own, and checks: no error
// outputs, the expected MIME types, and (through the notebook's own asserts)
// what the notebook shows.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startCluster, type TestCluster } from "../helpers/cluster.js";
import { PYTHON, REPO_ROOT, TempKernelspec } from "./bridge.js";
import { CHROMIUM, exportHtml, pngStats, renderedDom, screenshot } from "./render.js";

interface CellSummary {
  index: number;
  execution_count: number | null;
  source: string;
  outputs: Array<{ output_type: string; mime?: string[]; text?: string; name?: string; ename?: string; evalue?: string; traceback?: string[] }>;
}

/** Runs run_notebook.py; rejects past `limitMs` (the child is killed). */
function runNotebook(notebook: string, spec: TempKernelspec, env: Record<string, string>, outFile: string, limitMs: number): Promise<{ elapsed_s: number; cells: CellSummary[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [path.join(REPO_ROOT, "test/kernel/run_notebook.py"), notebook, spec.name, outFile, "120"], {
      env: { ...process.env, ...env, JUPYTER_PATH: spec.jupyterPath },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`nbclient did not finish within ${limitMs} ms; stderr:\n${err}`));
    }, limitMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`run_notebook.py exited ${code}; stderr:\n${err}`));
      else resolve(JSON.parse(out) as { elapsed_s: number; cells: CellSummary[] });
    });
  });
}

let cluster: TestCluster;
let spec: TempKernelspec;
let home: string;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "nb-agent", cpus: 4, mem: "8g" }] });
  spec = new TempKernelspec();
  home = mkdtempSync(path.join(tmpdir(), "hearth-nb-home-"));
});

after(async () => {
  await cluster?.stop();
  spec?.remove();
  if (home) rmSync(home, { recursive: true, force: true });
});

let executed: string | undefined;

test("02-runtime-tour.ipynb runs under nbclient with no errors and renders tables, a figure, progress, objects and status", async () => {
  const outFile = path.join(home, "02-runtime-tour.out.ipynb");
  const result = await runNotebook(path.join(REPO_ROOT, "notebooks/02-runtime-tour.ipynb"), spec, { HEARTH_HEAD: cluster.endpoint, HEARTH_HOME: home }, outFile, 150_000);
  console.log(`# 02-runtime-tour.ipynb executed in ${result.elapsed_s.toFixed(1)} s`);

  const errors = result.cells.flatMap((c) => c.outputs.filter((o) => o.output_type === "error").map((o) => `cell ${c.index} (${c.source}…): ${o.ename}: ${o.evalue}\n${(o.traceback ?? []).join("\n")}`));
  assert.deepEqual(errors, [], "no cell fails (the notebook's own asserts included)");
  const stderr = result.cells.flatMap((c) => c.outputs.filter((o) => o.output_type === "stream" && o.name === "stderr").map((o) => o.text));
  assert.deepEqual(stderr, [], "no cell writes to stderr");
  for (const c of result.cells) assert.ok(c.execution_count !== null, `cell ${c.index} ran`);

  const rich = result.cells.flatMap((c) => c.outputs.filter((o) => o.mime).map((o) => ({ cell: c.index, mime: o.mime!, text: o.text ?? "" })));
  for (const r of rich) assert.ok(r.mime.includes("text/plain"), `every bundle has text/plain (cell ${r.cell})`);
  const tables = rich.filter((r) => r.mime.includes("text/html") && /executor|rank/.test(r.text));
  assert.ok(tables.length >= 3, `gang table, answers table and status views render as HTML (${tables.length})`);
  const figures = rich.filter((r) => r.mime.includes("application/vnd.plotly.v1+json"));
  assert.equal(figures.length, 1, "one plotly figure");
  assert.ok(figures[0]!.mime.includes("text/html"), "the figure has an HTML fallback");
  const bars = rich.filter((r) => r.text.startsWith("slow calls ["));
  assert.equal(bars.length, 1, "the progress bar is one output, updated in place");
  assert.match(bars[0]!.text, /12\/12 100%.*peak \d executors/);
  assert.ok(rich.some((r) => r.text.startsWith("versions of tour/numbers") && r.mime.includes("text/html")), "the object versions table is shown");
  const status = rich.filter((r) => r.text.startsWith("head "));
  assert.ok(status.length >= 2, "status views are shown");
  assert.match(status[0]!.text, /squares \[pool/);
  assert.match(status[0]!.text, /ring \[gang/);
  executed = outFile;
});

test("the executed 02-runtime-tour exported to HTML draws its plot offline in headless Chromium", { skip: existsSync(CHROMIUM) ? false : `no ${CHROMIUM}` }, async () => {
  assert.ok(executed, "the notebook ran (previous test)");
  const outDir = path.join(REPO_ROOT, "test-output", "kernel");
  mkdirSync(outDir, { recursive: true });
  const html = await exportHtml(executed, outDir);
  const dom = await renderedDom(html);
  assert.match(dom, /class="main-svg"/, "plotly.js (inlined) drew the figure");
  assert.match(dom, /<progress value="12" max="12"/, "the progress bar's final state is in the export");
  const png = path.join(outDir, "02-runtime-tour.png");
  await screenshot(html, png);
  const stats = pngStats(png);
  console.log(`# screenshot ${png}: ${stats.width}x${stats.height}, ${(stats.nonWhite * 100).toFixed(1)}% non-white, ${stats.colors} colors`);
  assert.ok(stats.nonWhite > 0.02 && stats.colors > 50, `the screenshot is not blank: ${JSON.stringify(stats)}`);
});
