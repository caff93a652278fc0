/**
 * Jupyter Notebook 6's page, worked the way a person works it: click a
 * cell, press Run, answer an input box, press the toolbar's stop
 * button, pick Kernel → Restart and confirm. What the test reads back is what
 * the page shows (the DOM of each cell's outputs); the notebook's own
 * JavaScript state is only read to know when a cell has finished (its
 * prompt leaves "*") and when a restarted kernel is ready.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import type { BrowserContext, Page } from "playwright-core";

// Only inside page.evaluate / waitForFunction callbacks, which run in the page: the test's tsconfig has no DOM types.
declare const window: any;
declare const document: any;

/** What one output of a cell shows. */
export interface ShownOutput {
  /** The output's classes: output_text, output_html, output_error, output_stderr, … */
  classes: string[];
  text: string;
}

/** A cell as the page holds it. */
export interface PageCell {
  type: "code" | "markdown" | "raw";
  source: string;
  tags: string[];
}

/** An open notebook in Notebook 6's page. */
export class ClassicNotebook {
  /** Uncaught errors of the page's own scripts (a broken renderer shows up here). */
  readonly pageErrors: string[] = [];

  private constructor(readonly page: Page) {
    page.on("pageerror", (err) => this.pageErrors.push(err.message));
  }

  /** Opens `url` in a new tab and waits (90 s) until its kernel is started and connected. */
  static async open(context: BrowserContext, url: string): Promise<ClassicNotebook> {
    const nb = new ClassicNotebook(await context.newPage());
    await nb.page.goto(url);
    await nb.page.waitForFunction(() => window.Jupyter?.notebook?.kernel?.is_connected?.() === true && window.Jupyter.notebook.kernel.info_reply?.status === "ok", null, { timeout: 90_000 });
    return nb;
  }

  /** The notebook's cells as loaded (before any was run: running the last one adds an empty cell below it). */
  async cells(): Promise<PageCell[]> {
    return this.page.evaluate(() => window.Jupyter.notebook.get_cells().map((c: any) => ({ type: c.cell_type, source: c.get_text(), tags: c.metadata?.tags ?? [] })));
  }

  /** Cell `i`'s element. */
  cell(i: number) {
    return this.page.locator("#notebook-container > .cell").nth(i);
  }

  /**
   * Selects cell `i` by clicking its prompt (not its text: a markdown cell's
   * link would navigate away) and presses the toolbar's Run button (not
   * Shift+Enter: after an input box, Notebook 6 leaves its keyboard
   * shortcuts off until a cell editor is focused again). A code cell is
   * awaited until its prompt shows a number (`timeoutMs`); `whileRunning`
   * acts on the page meanwhile (answer an input, press stop).
   */
  async run(i: number, opts: { timeoutMs?: number; whileRunning?: () => Promise<void> } = {}): Promise<void> {
    await this.cell(i).locator(".input_prompt").click();
    await this.page.waitForFunction((k) => window.Jupyter.notebook.get_selected_index() === k, i, { timeout: 10_000 });
    await this.page.locator('button[data-jupyter-action="jupyter-notebook:run-cell-and-select-next"]').click();
    const code = await this.page.evaluate((k) => window.Jupyter.notebook.get_cell(k).cell_type === "code", i);
    if (!code) return;
    await this.page.waitForFunction((k) => window.Jupyter.notebook.get_cell(k).input_prompt_number === "*", i, { timeout: 10_000 }).catch(() => undefined);
    try {
      await opts.whileRunning?.();
      await this.page.waitForFunction((k) => typeof window.Jupyter.notebook.get_cell(k).input_prompt_number === "number", i, { timeout: opts.timeoutMs ?? 180_000 });
    } catch (err) {
      const state = await this.page.evaluate((k) => ({ prompt: String(window.Jupyter.notebook.get_cell(k).input_prompt_number), busy: window.Jupyter.notebook.kernel_busy, source: window.Jupyter.notebook.get_cell(k).get_text().slice(0, 80) }), i).catch(() => undefined);
      const shown = await this.outputs(i).catch(() => []);
      throw new Error(`cell ${i} (${JSON.stringify(state)}) did not finish: ${(err as Error).message}\nit shows: ${JSON.stringify(shown).slice(0, 2000)}\npage errors: ${this.pageErrors.join("; ")}`, { cause: err });
    }
  }

  /** The execution count cell `i` shows. */
  async executionCount(i: number): Promise<number | null> {
    return this.page.evaluate((k) => {
      const n = window.Jupyter.notebook.get_cell(k).input_prompt_number;
      return typeof n === "number" ? n : null;
    }, i);
  }

  /** Waits (`timeoutMs`) for cell `i`'s input box (what `input()` shows), types `answer` into it and presses Enter. */
  async answerInput(i: number, answer: string, timeoutMs = 30_000): Promise<string> {
    const box = this.cell(i).locator("input.raw_input");
    await box.waitFor({ state: "visible", timeout: timeoutMs });
    const prompt = (await this.cell(i).locator(".raw_input_prompt").textContent()) ?? "";
    await box.fill(answer);
    await box.press("Enter");
    return prompt;
  }

  /** Presses the toolbar's stop button (interrupt the kernel). */
  async pressStop(): Promise<void> {
    await this.page.locator('button[data-jupyter-action="jupyter-notebook:interrupt-kernel"]').click();
  }

  /** Kernel → Restart, then "Restart" in the dialog; resolves once the new kernel is ready (90 s). */
  async restartKernel(): Promise<void> {
    await this.page.evaluate(() => {
      window.__hearthKernelReady = false;
      window.Jupyter.notebook.events.one("kernel_ready.Kernel", () => (window.__hearthKernelReady = true));
    });
    await this.page.locator("#kernellink").click();
    await this.page.locator("#restart_kernel > a").click();
    const dialog = this.page.locator(".modal-dialog");
    await dialog.waitFor({ state: "visible", timeout: 10_000 });
    await dialog.locator("button.btn-danger", { hasText: "Restart" }).click();
    await this.page.waitForFunction(() => window.__hearthKernelReady === true && window.Jupyter.notebook.kernel.is_connected(), null, { timeout: 90_000 });
  }

  /** What cell `i`'s output area shows: one entry per output. */
  async outputs(i: number): Promise<ShownOutput[]> {
    return this.cell(i).evaluate((el: any) =>
      Array.from(el.querySelectorAll(".output_area")).map((a: any) => {
        const sub = a.querySelector(".output_subarea");
        return { classes: sub ? Array.from(sub.classList as Iterable<string>) : [], text: (sub?.innerText ?? "").trim() };
      }),
    );
  }

  /** Every error and stderr output on the page, as "cell i: text". */
  async errorOutputs(): Promise<string[]> {
    return this.page.evaluate(() =>
      Array.from(document.querySelectorAll("#notebook-container > .cell")).flatMap((c: any, i: number) =>
        Array.from(c.querySelectorAll(".output_error, .output_stderr")).map((o: any) => `cell ${i}: ${(o.innerText as string).slice(0, 400)}`),
      ),
    );
  }

  /** Screenshots the whole notebook into `file` (the page scrolls inside #site: it is unrolled first). */
  async screenshot(file: string): Promise<void> {
    mkdirSync(path.dirname(file), { recursive: true });
    await this.page.evaluate(() => {
      const site = document.querySelector("#site");
      site.style.height = "auto";
      site.style.overflow = "visible";
    });
    await this.page.screenshot({ path: file, fullPage: true });
    await this.page.evaluate(() => {
      const site = document.querySelector("#site");
      site.style.height = "";
      site.style.overflow = "";
    });
  }
}
