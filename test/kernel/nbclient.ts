/**
 * Executes a notebook with Debian's nbclient (test/kernel/run_notebook.py)
 * through a temporary hearth kernelspec and returns a summary of every code
 * cell's outputs.
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { PYTHON, REPO_ROOT, type TempKernelspec } from "./bridge.js";

/** One executed code cell as run_notebook.py summarises it. */
export interface CellSummary {
  index: number;
  execution_count: number | null;
  source: string;
  outputs: Array<{ output_type: string; mime?: string[]; text?: string; name?: string; ename?: string; evalue?: string; traceback?: string[] }>;
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
