/**
 * The kernel's ipywidgets 8 models drawn by ipywidgets 8's own renderer in
 * a real browser: Notebook 6 cannot render them (it ships ipywidgets 6's
 * manager), so a page of the test (widget-page.ts) on the Notebook server's
 * origin connects @jupyter-widgets/html-manager to a live hearth kernel over
 * the server's kernel websocket. A training monitor (an HTML chart, a Stop
 * button and a label in boxes) is shown, its chart updates in place while a
 * loop pushes points, a click on Stop in the page reaches the kernel and
 * ends the loop, and the button ends disabled. Screenshot in
 * test-output/browser/widgets.png.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { REPO_ROOT, TempKernelspec } from "./bridge.js";
import { assertDrawn } from "./notebook-rig.js";
import { browserSkip, launchChromium, NotebookServer } from "./notebook-server.js";
import { installWidgetPage, widgetPageUrl } from "./widget-page.js";

// Only inside page callbacks, which run in the page.
declare const window: any;
declare const document: any;

const EMBED = path.join(REPO_ROOT, "node_modules", "@jupyter-widgets", "html-manager", "dist", "embed-amd.js");
const skip = browserSkip() || (existsSync(EMBED) ? false : `no ${EMBED} (npm install: @jupyter-widgets/html-manager is a devDependency)`);
const SHOT = path.join(REPO_ROOT, "test-output", "browser", "widgets.png");
let spec: TempKernelspec | undefined;
let dir: string | undefined;
let server: NotebookServer | undefined;
let browser: Awaited<ReturnType<typeof launchChromium>> | undefined;

before(async () => {
  if (skip) return;
  spec = new TempKernelspec();
  dir = mkdtempSync(path.join(tmpdir(), "hearth-widgets-"));
  installWidgetPage(spec.jupyterPath);
  server = await NotebookServer.start(dir, spec.jupyterPath, { HEARTH_HOME: path.join(dir, "home") });
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await server?.stop();
  spec?.remove();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a training monitor's ipywidgets 8 models render with @jupyter-widgets/html-manager on a live kernel: the chart updates in place, Stop in the page ends the loop", { skip, timeout: 180_000 }, async () => {
  const { id } = await server!.api<{ id: string }>("POST", "/api/kernels", { name: spec!.name });
  const page = await browser!.context.newPage();
  const pageErrors: string[] = [];
  page.on("pageerror", (err) => pageErrors.push(err.message));
  await page.goto(widgetPageUrl(server!.base, id, server!.token));
  await page.waitForFunction(() => window.hearthWidgets !== undefined, null, { timeout: 30_000 });
  await page.evaluate(() => Promise.race([window.hearthWidgets.ready, new Promise((_, reject) => setTimeout(() => reject(new Error("the page did not connect within 60 s")), 60_000))])).catch((err: Error) => {
    throw new Error(`${err.message}\nthe server says:\n${server!.output().slice(-3000)}`, { cause: err });
  });
  const execute = (code: string): Promise<{ reply: { status: string; ename?: string; evalue?: string }; outputs: string[] }> => page.evaluate((c) => window.hearthWidgets.execute(c), code);

  const started = await execute(
    [
      'import { trainingMonitor } from "hearth/notebook";',
      'const monitor = trainingMonitor({ title: "browser", metrics: ["reward"], intervalMs: 0 });',
      "monitor.show();",
      "let steps = 0;",
      // Ends when Stop aborts the signal (the cap only keeps a broken test from spinning for ever).
      "const loop = (async () => { while (!monitor.signal.aborted && steps < 6000) { monitor.push({ step: ++steps, reward: steps % 7 }); await new Promise((r) => setTimeout(r, 100)); } monitor.finish(); return steps; })();",
      '"started"',
    ].join("\n"),
  );
  assert.equal(started.reply.status, "ok", JSON.stringify(started));

  // The models arrive as comms and the view as display_data: html-manager draws the chart, the button and the label.
  const stop = page.locator(".hearth-widget-output button.jupyter-button", { hasText: "Stop" });
  await stop.waitFor({ state: "visible", timeout: 30_000 });
  const stepShown = (): Promise<number> => page.evaluate(() => Number(/step (\d+)/.exec(document.querySelector(".hearth-widget-output .hearth-training")?.innerText ?? "")?.[1] ?? 0));
  await page.waitForFunction(() => Number(/step (\d+)/.exec(document.querySelector(".hearth-widget-output .hearth-training")?.innerText ?? "")?.[1] ?? 0) >= 3, null, { timeout: 30_000 });
  const first = await stepShown();
  await page.waitForFunction((n) => Number(/step (\d+)/.exec(document.querySelector(".hearth-widget-output .hearth-training")?.innerText ?? "")?.[1] ?? 0) > n, first, { timeout: 30_000 });
  assert.equal(await page.locator(".hearth-widget-output .hearth-training").count(), 1, "the chart is updated in place: one chart");
  const chart = await page.locator(".hearth-widget-output .hearth-training svg").first().boundingBox();
  assert.ok(chart && chart.width > 20 && chart.height > 10, `the chart's SVG has a size: ${JSON.stringify(chart)}`);

  // A click in the page: a `custom` message to the kernel, which aborts the loop's signal.
  await stop.click();
  const ended = await execute("await loop");
  assert.equal(ended.reply.status, "ok", JSON.stringify(ended));
  const steps = Number(ended.outputs[0]);
  assert.ok(steps >= first, `the loop ran ${steps} steps, then stopped`);
  assert.deepEqual((await execute("monitor.signal.aborted")).outputs, ["true"], "Stop aborted the signal");
  await page.locator(".hearth-widget-output button.jupyter-button:disabled", { hasText: "Stopped" }).waitFor({ timeout: 30_000 });
  assert.match(await page.locator(".hearth-widget-output .hearth-training").innerText(), new RegExp(`step ${steps}\\b`), "the chart's last state is the last step");

  assert.deepEqual(await page.evaluate(() => window.hearthWidgets.errors), [], "the page's client handled every message");
  assert.deepEqual(pageErrors, [], "no script error on the page");
  await page.screenshot({ path: SHOT, fullPage: true });
  assertDrawn(SHOT);
  await page.close();
  await server!.api("DELETE", `/api/kernels/${id}`);
});
