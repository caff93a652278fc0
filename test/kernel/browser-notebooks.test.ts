/**
 * The notebooks as a person runs them: Debian's Jupyter Notebook 6 serves
 * copies of notebooks 01, 02 and 05 (outside the checkout), headless Chromium
 * (driven by playwright-core) opens each through the UI and runs it cell by
 * cell with the Run button, answering `input()` in the page, pressing the stop
 * button during `run.train(40)` and restarting the kernel from the Kernel
 * menu; the checks read what the page shows: no error or stderr output
 * (but the interrupted cell's KeyboardInterrupt), plotly figures drawn as
 * SVG with size and traces, progress bars as one output in their final
 * state, the trajectory's spans in three colours, the step card with its
 * metrics behind one click, and the run usable after the stop; notebook 05's
 * replay coloured by probability with each token's alternatives on hover, and
 * its what-if branch beside the original. Screenshots are kept in
 * test-output/browser/.
 */
import assert from "node:assert/strict";
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { REPO_ROOT } from "./bridge.js";
import { ClassicNotebook } from "./notebook-page.js";
import { assertDrawn, useNotebookRig } from "./notebook-rig.js";
import { browserSkip, launchChromium, NotebookServer } from "./notebook-server.js";

// Only inside page callbacks (evaluate, waitForFunction), which run in the page.
declare const getComputedStyle: any;
declare const document: any;

const skip = browserSkip();
const rig = useNotebookRig("browser-agent", "hearth-browser-home-");
const SHOTS = path.join(REPO_ROOT, "test-output", "browser");
let server: NotebookServer | undefined;
let browser: Awaited<ReturnType<typeof launchChromium>> | undefined;

/** Copies notebook `name` into `folder`, its kernelspec renamed to the rig's (what installing the kernel under that name gives). */
function copyNotebook(name: string, folder: string): void {
  const nb = JSON.parse(readFileSync(path.join(REPO_ROOT, "notebooks", name), "utf8")) as { metadata: { kernelspec: Record<string, string> } };
  nb.metadata.kernelspec = { ...nb.metadata.kernelspec, name: rig.spec.name, display_name: `TypeScript (${rig.spec.name})` };
  writeFileSync(path.join(folder, name), JSON.stringify(nb, null, 1));
}

before(async () => {
  if (skip) return;
  await rig.ready();
  const folder = path.join(rig.home, "my-project");
  mkdirSync(folder, { recursive: true });
  copyNotebook("01-search-r1.ipynb", folder);
  copyNotebook("02-runtime-tour.ipynb", folder);
  copyNotebook("05-debug-an-episode.ipynb", folder);
  cpSync(path.join(REPO_ROOT, "notebooks", "services"), path.join(folder, "services"), { recursive: true });
  server = await NotebookServer.start(folder, rig.spec.jupyterPath, rig.kernelEnv());
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.stop();
});

/** The first cell whose source starts with `start`. */
function find(cells: Array<{ source: string }>, start: string): number {
  const i = cells.findIndex((c) => c.source.startsWith(start));
  assert.ok(i >= 0, `a cell starting with ${JSON.stringify(start)}`);
  return i;
}

/** Each plotly figure of cell `i` as drawn: its SVG's size and how many traces it drew. */
async function figures(nb: ClassicNotebook, i: number): Promise<Array<{ width: number; height: number; traces: number }>> {
  return nb.cell(i).evaluate((el: any) =>
    Array.from(el.querySelectorAll(".js-plotly-plot")).map((f: any) => {
      const svg = f.querySelector("svg.main-svg");
      const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
      return { width: box.width, height: box.height, traces: f.querySelectorAll(".trace").length };
    }),
  );
}

/** The <progress> bars cell `i` shows: one per output, with their value, maximum and label. */
async function bars(nb: ClassicNotebook, i: number): Promise<Array<{ value: number; max: number; text: string }>> {
  return nb.cell(i).evaluate((el: any) =>
    Array.from(el.querySelectorAll(".output_area progress")).map((p: any) => ({ value: Number(p.getAttribute("value")), max: Number(p.getAttribute("max")), text: (p.closest(".output_subarea").innerText as string).trim() })),
  );
}

test("notebook 02 in Jupyter Notebook 6 and Chromium: run cell by cell, input() answered in the page, a plot drawn, a progress bar updated in place", { skip, timeout: 300_000 }, async () => {
  const nb = await ClassicNotebook.open(browser!.context, server!.notebookUrl("02-runtime-tour.ipynb"));
  const cells = await nb.cells();
  const ask = find(cells, "const n = Number(await input(");
  let prompt = "";
  for (let i = 0; i < cells.length; i++) {
    await nb.run(i, i === ask ? { whileRunning: async () => void (prompt = await nb.answerInput(i, "12")) } : {});
  }
  await nb.screenshot(path.join(SHOTS, "02-runtime-tour.png"));
  assert.deepEqual(await nb.errorOutputs(), [], "no cell shows an error or stderr");
  assert.match(prompt, /square which number\?/, "input() asked in the page");
  assert.deepEqual((await nb.outputs(ask)).map((o) => o.text), ["square which number? 12", "144"], "the answer typed in the page reached the kernel: 12 squared");

  const slow = find(cells, "const executorsOf");
  const shown = await bars(nb, slow);
  assert.equal(shown.length, 1, "the progress bar is one output, updated in place");
  assert.deepEqual([shown[0]!.value, shown[0]!.max], [12, 12], "in its final state");
  assert.match(shown[0]!.text, /12\/12 \(100%\).*peak \d+ executors, 12\/12 answers right/);

  const plots = await figures(nb, find(cells, "const servedBy"));
  assert.equal(plots.length, 1, "one plotly figure");
  assert.ok(plots[0]!.width > 100 && plots[0]!.height > 100, `the figure's SVG has a size: ${JSON.stringify(plots[0])}`);
  assert.ok(plots[0]!.traces >= 1, "and draws its bars");
  assert.ok((await nb.cell(find(cells, "const gang = await app.service")).locator("table").count()) >= 1, "tables render as HTML tables");
  assertDrawn(path.join(SHOTS, "02-runtime-tour.png"));
  await nb.page.close();
});

test("notebook 01 in Jupyter Notebook 6 and Chromium: the stop button ends run.train between steps, the run stays usable, the kernel restarts from the menu; figures, spans, the step card", { skip, timeout: 540_000 }, async () => {
  const nb = await ClassicNotebook.open(browser!.context, server!.notebookUrl("01-search-r1.ipynb"));
  const cells = await nb.cells();
  const train = find(cells, "await run.train(40);");
  const restart = cells.findIndex((c) => c.tags.includes("restart-kernel-before"));
  assert.ok(restart > train, "the restart comes after the training");
  for (let i = 0; i < cells.length; i++) {
    if (i === restart) await nb.restartKernel();
    const whileRunning =
      i === train
        ? async () => {
            // Stop once two steps are done: the bar (one output, updated in place) says so.
            await nb.cell(i).locator(".output_area progress").first().waitFor({ timeout: 120_000 });
            await nb.page.waitForFunction((k) => Number(document.querySelectorAll("#notebook-container > .cell")[k].querySelector(".output_area progress")?.getAttribute("value") ?? 0) >= 2, i, { timeout: 300_000 });
            await nb.pressStop();
          }
        : undefined;
    await nb.run(i, { whileRunning, timeoutMs: 300_000 }).catch((err: Error) => {
      throw new Error(`${err.message}\nthe server says:\n${server!.output().slice(-4000)}`, { cause: err });
    });
    if (i === train) {
      // The cell ends at once; the step in flight finishes, and the bar then says where the loop stopped.
      await nb.page.waitForFunction((k) => /stopped after \d+ step\(s\) \(interrupted\)/.test(document.querySelectorAll("#notebook-container > .cell")[k].innerText), i, { timeout: 300_000 });
    }
  }
  await nb.screenshot(path.join(SHOTS, "01-search-r1.png"));

  // The stop button: KeyboardInterrupt in that cell and nowhere else; the bar stopped between steps.
  const errors = await nb.errorOutputs();
  assert.equal(errors.length, 1, errors.join("\n"));
  assert.match(errors[0]!, new RegExp(`^cell ${train}: KeyboardInterrupt: interrupted while the cell awaited`));
  const trainBars = await bars(nb, train);
  assert.equal(trainBars.length, 1, "one bar, updated in place");
  const done = Number(/stopped after (\d+) step\(s\) \(interrupted\)/.exec(trainBars[0]!.text)?.[1]);
  assert.ok(done >= 2 && done < 40, `stopped early, after a whole step (${trainBars[0]!.text})`);
  assert.equal(trainBars[0]!.value, done, "the bar's value is the steps done");

  // The run stays usable: the next cells ran, and the step numbers follow on from where the loop stopped.
  const outcome = (await nb.outputs(find(cells, "const outcome"))).map((o) => o.text).join("\n");
  const after = 1 + done + 2; // step(), the interrupted train, then the misuse cell's first and recovered steps
  assert.match(outcome, new RegExp(`ran as step ${after}; ${after} steps in history`), outcome);
  assert.equal(await nb.executionCount(restart), 1, "the cell after the restart ran in a new kernel");
  assert.match((await nb.outputs(restart)).map((o) => o.text).join("\n"), new RegExp(`after the restart: reattached at step ${after} with ${after} steps of history`));
  const last = await bars(nb, find(cells.slice(restart), "await run.train(2);") + restart);
  assert.deepEqual(last.map((b) => [b.value, b.max]), [[2, 2]], "training goes on after the restart: one bar, final state");
  assert.match(last[0]!.text, new RegExp(`step ${after + 2}: reward`));

  // Figures: five plotly SVGs with a size and traces (the advantages, three curves, lengths).
  const drawn = [...(await figures(nb, find(cells, "plot.advantages"))), ...(await figures(nb, find(cells, "display(plot.curve")))];
  assert.equal(drawn.length, 5, JSON.stringify(drawn));
  for (const f of drawn) assert.ok(f.width > 100 && f.height > 100 && f.traces >= 1, `a drawn figure: ${JSON.stringify(f)}`);

  // The trajectory: prompt, generated and observation (retrieved) spans, each drawn, in three different colours.
  const spans = await nb.cell(find(cells, "const right =")).evaluate((el: any) =>
    ["prompt", "generated", "observation"].map((kind) => {
      const s = Array.from(el.querySelectorAll(`.hearth-span.hearth-${kind}`)) as any[];
      const box = s[0]?.getBoundingClientRect();
      return { kind, count: s.length, colour: s[0] ? getComputedStyle(s[0]).backgroundColor : "", width: box?.width ?? 0 };
    }),
  );
  for (const s of spans) assert.ok(s.count >= 1 && s.width > 0 && !/rgba\(0, 0, 0, 0\)|transparent/.test(s.colour), `${s.kind} spans are drawn in a colour: ${JSON.stringify(s)}`);
  assert.equal(new Set(spans.map((s) => s.colour)).size, 3, `three colours: ${JSON.stringify(spans)}`);

  // The step card reads at a glance; every metric is one click away.
  const card = nb.cell(find(cells, "const first = await run.step();")).locator(".hearth-step-card");
  assert.ok(await card.isVisible(), "the step card is shown");
  const tiles = await card.locator(".hearth-card-tile").allInnerTexts();
  assert.deepEqual(tiles.map((t) => t.split("\n")[0]), ["reward", "EM", "searches / sample", "groups kept"]);
  const table = card.locator(".hearth-all-metrics table");
  assert.equal(await table.isVisible(), false, "the full metrics are folded away");
  const summary = card.locator(".hearth-all-metrics summary");
  const count = Number(/all (\d+) metrics/.exec((await summary.innerText()) ?? "")?.[1]);
  await summary.click();
  assert.ok(await table.isVisible(), "one click shows them");
  assert.equal(await table.locator("tbody tr").count(), count, `all ${count} metrics`);
  await nb.screenshot(path.join(SHOTS, "01-search-r1-card-open.png"));
  assertDrawn(path.join(SHOTS, "01-search-r1.png"));
  await nb.page.close();
});

test("notebook 05 in Jupyter Notebook 6 and Chromium: the replay coloured by probability, alternatives on hover, the branch beside the original", { skip, timeout: 420_000 }, async () => {
  const nb = await ClassicNotebook.open(browser!.context, server!.notebookUrl("05-debug-an-episode.ipynb"));
  const cells = await nb.cells();
  for (let i = 0; i < cells.length; i++) await nb.run(i, { timeoutMs: 240_000 });
  await nb.screenshot(path.join(SHOTS, "05-debug-an-episode.png"));
  assert.deepEqual(await nb.errorOutputs(), [], "no cell shows an error or stderr");
  const replay = nb.cell(find(cells, "const ep = await run.replay"));
  // Generated tokens are drawn in more than one probability colour, observations apart.
  const colours = await replay.evaluate((el: any) => [...new Set(Array.from(el.querySelectorAll(".hearth-generated")).map((t: any) => getComputedStyle(t).backgroundColor as string))]);
  assert.ok(colours.length >= 2, `generated tokens in ${colours.length} colours: ${colours.join(", ")}`);
  assert.ok((await replay.locator(".hearth-observation").count()) > 0, "the calculator's results marked as inserted");
  // Hovering a generated token shows its probability and alternatives.
  const token = replay.locator(".hearth-generated").first();
  await token.hover();
  assert.match((await token.getAttribute("title")) ?? "", /p \d\.\d{4}, entropy [\d.]+\nalternatives: ".*" \d\.\d{3}/);
  const branch = nb.cell(find(cells, "const again ="));
  assert.equal(await branch.locator(".hearth-branch > div[style*='display:flex'] > div").count(), 2, "the original and the branch side by side");
  assert.ok((await branch.locator(".hearth-forced").count()) >= 1, "the forced text marked");
  assertDrawn(path.join(SHOTS, "05-debug-an-episode.png"));
  await nb.page.close();
});
