// Runs notebooks/02-runtime-tour.ipynb with Debian's nbclient through the
// hearth kernel against a head and agent of its own, from a copy in a
// temporary folder outside the checkout (so its `import … from "hearth"`
// must resolve through the kernelspec), and checks: no error outputs, the
// expected MIME types, and what the notebook shows.
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { REPO_ROOT } from "./bridge.js";
import { cellHtml, cellText, htmlRows } from "./nbclient.js";
import { assertDrawn, useNotebookRig } from "./notebook-rig.js";
import { CHROMIUM, exportHtml, renderedDom, screenshot } from "./render.js";

const rig = useNotebookRig("nb-agent", "hearth-nb-home-");

let executed: string | undefined;

test("02-runtime-tour.ipynb runs under nbclient with no errors and renders tables, a figure, progress, objects and status", async () => {
  const outFile = path.join(rig.home, "02-runtime-tour.out.ipynb");
  // A folder of the user's, outside the checkout: the notebook and the services beside it.
  const folder = path.join(rig.home, "my-project");
  cpSync(path.join(REPO_ROOT, "notebooks", "02-runtime-tour.ipynb"), path.join(folder, "02-runtime-tour.ipynb"));
  cpSync(path.join(REPO_ROOT, "notebooks", "services"), path.join(folder, "services"), { recursive: true });
  assert.ok(path.relative(REPO_ROOT, folder).startsWith(".."), `${folder} is outside the checkout`);
  const result = await rig.run(path.join(folder, "02-runtime-tour.ipynb"), outFile, 150_000);
  const rich = result.rich;
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

  // What each section shows (the notebook asserts nothing itself: it reads as a tutorial).
  assert.match(cellText(result.cells, "import { connect }")[0]!, /^'connected to tcp:\/\/[^:]+:\d+: [1-9]\d* agent\(s\)'$/);
  assert.deepEqual(cellText(result.cells, "const pool = await app.service"), ["9"], "square(3) on the pool");
  assert.deepEqual(cellText(result.cells, "const n = Number(await input("), ["49"], "nbclient takes no input: input() gave its default, 7");
  const gang = htmlRows(cellHtml(result.cells, "const gang = await app.service")[0]!);
  assert.deepEqual(gang.map((m) => [m.rank, m.worldSize]), [["0", "2"], ["1", "2"]], "gang members are ranked 0 and 1 of 2");
  const peak = Number(/peak (\d+) executors, 12\/12 answers right/.exec(bars[0]!.text)?.[1]);
  assert.ok(peak > 1, `the pool grew under load (${bars[0]!.text})`);
  const served = htmlRows(cellHtml(result.cells, "const servedBy")[0]!);
  assert.ok(served.length > 1, `more than one executor answered: ${JSON.stringify(served)}`);
  assert.equal(served.reduce((n, r) => n + Number(r.calls), 0), 12);
  const versions = Object.fromEntries(htmlRows(cellHtml(result.cells, "const objects = app.objects;")[0]!).map((r) => [r.step!.replace(/^sum on .*/, "sum"), r]));
  assert.deepEqual(["put [1, 2, 3]", "patch [4, 5]", "patch [6]"].map((k) => versions[k]!.version), ["1", "2", "3"]);
  assert.equal(versions.get!.result, "[1,2,3,4,5]", "the first get: base and patch");
  assert.equal(versions["get again"]!.result, "[1,2,3,4,5,6], 1 patch fetched", "the second get fetched only the new patch");
  assert.equal(versions["update if version is 1"]!.result, "VersionConflictError");
  assert.deepEqual([versions.sum!.result, versions.sum!.version], ["sum 21", "3"], "the executor summed version 3");
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
  assertDrawn(png);
});
