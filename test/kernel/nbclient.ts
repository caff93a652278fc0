/**
 * Executes a notebook with Debian's nbclient (test/kernel/run_notebook.py)
 * through a temporary hearth kernelspec and returns a summary of every code
 * cell's outputs.
 */
import { spawn } from "node:child_process";
import assert from "node:assert/strict";
import path from "node:path";
import { PYTHON, REPO_ROOT, type TempKernelspec } from "./bridge.js";

/** One executed code cell as run_notebook.py summarises it. */
export interface CellSummary {
  index: number;
  execution_count: number | null;
  source: string;
  /** The cell's metadata tags ("restart-kernel-before": run_notebook.py restarted the kernel first). */
  tags: string[];
  outputs: Array<{ output_type: string; mime?: string[]; text?: string; html?: string; name?: string; ename?: string; evalue?: string; traceback?: string[] }>;
}

/** Runs run_notebook.py (each cell gets `cellTimeoutS`); rejects past `limitMs` (the child is killed). */
export function runNotebook(notebook: string, spec: TempKernelspec, env: Record<string, string>, outFile: string, limitMs: number, cellTimeoutS = 120): Promise<{ elapsed_s: number; cells: CellSummary[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [path.join(REPO_ROOT, "test/kernel/run_notebook.py"), notebook, spec.name, outFile, String(cellTimeoutS)], {
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

/** Every error output, as "cell N (source…): name: message" with its traceback. */
export function errorOutputs(cells: CellSummary[]): string[] {
  return cells.flatMap((c) => c.outputs.filter((o) => o.output_type === "error").map((o) => `cell ${c.index} (${c.source}…): ${o.ename}: ${o.evalue}\n${(o.traceback ?? []).join("\n")}`));
}

/** The rows of a text table (header, rule, rows) as objects keyed by the header's columns. */
export function textRows(text: string, headerAt: number): Array<Record<string, string>> {
  const lines = text.split("\n");
  const header = lines[headerAt]!;
  const rule = lines[headerAt + 1]!;
  // Column spans come from the rule line ("----  -----"), so values with spaces stay whole.
  const spans = [...rule.matchAll(/-+/g)].map((m) => [m.index!, m.index! + m[0].length] as const);
  const cut = (line: string, i: number) => line.slice(spans[i]![0], i + 1 < spans.length ? spans[i + 1]![0] : undefined).trim();
  const names = spans.map((_, i) => cut(header, i));
  return lines.slice(headerAt + 2).filter((l) => l.trim() !== "").map((l) => Object.fromEntries(names.map((n, i) => [n || "key", cut(l, i)])));
}

/** The text/plain of the outputs of one cell, found by a line of its source. */
export function cellText(cells: CellSummary[], sourceStart: string): string[] {
  const cell = cells.find((c) => c.source.startsWith(sourceStart));
  assert.ok(cell, `a cell starting with ${JSON.stringify(sourceStart)}`);
  return cell.outputs.filter((o) => o.mime).map((o) => o.text ?? "");
}

/** The rows of the first HTML table in `html` (arquero's or htmlTable's) as objects keyed by its header cells; text unescaped. */
export function htmlRows(html: string): Array<Record<string, string>> {
  const unescape = (t: string) => t.replace(/<[^>]*>/g, "").replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, "&").trim();
  const table = /<table[\s\S]*?<\/table>/.exec(html)?.[0] ?? "";
  const rows = [...table.matchAll(/<tr[^>]*>([\s\S]*?)<\/tr>/g)].map((m) => [...m[1]!.matchAll(/<t[hd][^>]*>([\s\S]*?)<\/t[hd]>/g)].map((c) => unescape(c[1]!)));
  const [head, ...body] = rows;
  return body.map((r) => Object.fromEntries((head ?? []).map((h, i) => [h, r[i] ?? ""])));
}

/** A step card's metrics: the full table behind its "all N metrics" click (the HTML's one table). */
export function cardMetrics(html: string): Record<string, number> {
  assert.match(html, /<details class="hearth-all-metrics"/, "the card holds every metric behind a click");
  return Object.fromEntries(htmlRows(html).map((r) => [r[""]!, Number(r.value)]));
}

/** The HTML of the outputs of one cell, found by a line of its source. */
export function cellHtml(cells: CellSummary[], sourceStart: string): string[] {
  const cell = cells.find((c) => c.source.startsWith(sourceStart));
  assert.ok(cell, `a cell starting with ${JSON.stringify(sourceStart)}`);
  return cell.outputs.filter((o) => o.html).map((o) => o.html!);
}
