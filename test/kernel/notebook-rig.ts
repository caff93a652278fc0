/**
 * What the notebook tests share: a head and agent of their own, a temporary
 * kernelspec and HEARTH_HOME, a run of a notebook under nbclient with the
 * checks every notebook must pass (no error output, nothing on stderr, every
 * cell ran, every rich bundle has text/plain), and the screenshot check.
 */
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, afterEach, before } from "node:test";
import { secretFile } from "../../sdk/wire/auth.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";
import { REPO_ROOT, TempKernelspec } from "./bridge.js";
import { errorOutputs, runNotebook, type CellSummary } from "./nbclient.js";
import { pngStats } from "./render.js";

/** One rich output bundle of an executed notebook. */
export interface RichOutput {
  cell: number;
  /** The bundle's MIME types. */
  mime: string[];
  text: string;
}

/** The rig's parts, valid once the test file's `before` hook ran. */
export interface NotebookRig {
  readonly cluster: TestCluster;
  readonly home: string;
  /** The temporary kernelspec (its name and JUPYTER_PATH), for a front end of a test's own. */
  readonly spec: TempKernelspec;
  /** What a kernel of the rig needs in its environment: the rig's head, its own HEARTH_HOME and the cluster secret. */
  kernelEnv(): Record<string, string>;
  /**
   * Resolves once the rig's `before` hook has set it up: a test file's own
   * `before` must await it (node 20 starts a file's top-level `before` hooks
   * without waiting for the one before).
   */
  ready(): Promise<void>;
  /**
   * Runs `notebook` (writing `outFile`) through the hearth kernel against the
   * rig's cluster, asserts what every notebook must pass, and returns its
   * cells and rich outputs.
   */
  run(notebook: string, outFile: string, limitMs: number, cellTimeoutS?: number): Promise<{ cells: CellSummary[]; rich: RichOutput[] }>;
  /**
   * Runs the repository's `notebooks/NAME` as `run` does (its output in the
   * rig's home), with readers of the cell whose source starts with `start`:
   * its text outputs joined, its HTML outputs.
   */
  runRepo(name: string, limitMs?: number, cellTimeoutS?: number): Promise<ExecutedNotebook>;
}

/** An executed notebook of the repository, with readers of its cells' outputs. */
export interface ExecutedNotebook {
  cells: CellSummary[];
  rich: RichOutput[];
  /** The cell whose source starts with `start` (fails the test when there is none). */
  cell(start: string): CellSummary;
  /** That cell's text outputs, joined by newlines. */
  text(start: string): string;
  /** That cell's HTML outputs. */
  html(start: string): string[];
}

/** Registers `before`/`after` hooks that start and remove the rig; call at a test file's top level. */
export function useNotebookRig(agentId: string, homePrefix: string): NotebookRig {
  let cluster: TestCluster | undefined;
  let spec: TempKernelspec | undefined;
  let home: string | undefined;
  let setUp: (err?: unknown) => void = () => undefined;
  const ready = new Promise<void>((resolve, reject) => (setUp = (err) => (err === undefined ? resolve() : reject(err as Error))));
  ready.catch(() => undefined); // a failed set-up fails the hook itself; `ready()` rejects for whoever awaits it
  before(async () => {
    try {
      cluster = await startCluster({ agents: [{ id: agentId, cpus: 4, mem: "8g" }] });
      spec = new TempKernelspec();
      home = mkdtempSync(path.join(tmpdir(), homePrefix));
      // As a project folder is on a shared node: readable by other users, so the agent's executors (run as root, it
      // starts each app's as a user of its own) can import the notebook's service modules.
      chmodSync(home, 0o755);
      setUp();
    } catch (err) {
      setUp(err);
      throw err;
    }
  });
  // A failed test prints what its run did (each step's reward and versions) and what its processes logged of errors:
  // the folders go at stop, and a run that trained differently once is not reproduced by running it again.
  afterEach((t) => {
    if ("passed" in t && !t.passed && cluster && home) console.log(failureReport(cluster, home).replace(/^/gm, "# "));
  });
  after(async () => {
    await cluster?.stop();
    spec?.remove();
    // HEARTH_TEST_KEEP=1 keeps the kernel's home (the executed notebook, the run's metrics) as the cluster keeps its folder.
    if (home && process.env.HEARTH_TEST_KEEP !== "1") rmSync(home, { recursive: true, force: true });
  });
  return {
    get cluster() {
      return cluster!;
    },
    get home() {
      return home!;
    },
    get spec() {
      return spec!;
    },
    ready: () => ready,
    kernelEnv() {
      // The kernel has its own HEARTH_HOME; the cluster's secret is named explicitly (its driver proves a key derived from it).
      return { HEARTH_HEAD: cluster!.endpoint, HEARTH_HOME: home!, HEARTH_SECRET_FILE: secretFile() };
    },
    async run(notebook, outFile, limitMs, cellTimeoutS) {
      const env = this.kernelEnv();
      const result = await runNotebook(notebook, spec!, env, outFile, limitMs, cellTimeoutS);
      console.log(`# ${path.basename(notebook)} executed in ${result.elapsed_s.toFixed(1)} s`);
      assert.deepEqual(errorOutputs(result.cells), [], "no cell fails");
      const stderr = result.cells.flatMap((c) => c.outputs.filter((o) => o.output_type === "stream" && o.name === "stderr").map((o) => o.text));
      assert.deepEqual(stderr, [], "no cell writes to stderr");
      for (const c of result.cells) assert.ok(c.execution_count !== null, `cell ${c.index} ran`);
      const rich = result.cells.flatMap((c) => c.outputs.filter((o) => o.mime).map((o) => ({ cell: c.index, mime: o.mime!, text: o.text ?? "" })));
      for (const r of rich) assert.ok(r.mime.includes("text/plain"), `every bundle has text/plain (cell ${r.cell})`);
      return { cells: result.cells, rich };
    },
    async runRepo(name, limitMs = 480_000, cellTimeoutS = 240) {
      const { cells, rich } = await this.run(path.join(REPO_ROOT, "notebooks", name), path.join(home!, name.replace(/\.ipynb$/, ".out.ipynb")), limitMs, cellTimeoutS);
      const cell = (start: string): CellSummary => {
        const c = cells.find((x) => x.source.startsWith(start));
        assert.ok(c, `${name} has a cell starting ${JSON.stringify(start)}`);
        return c;
      };
      return {
        cells,
        rich,
        cell,
        text: (start) => cell(start).outputs.map((o) => o.text ?? "").join("\n"),
        html: (start) => cell(start).outputs.filter((o) => o.mime?.includes("text/html")).map((o) => o.html ?? ""),
      };
    },
  };
}

/** Fails unless the screenshot at `png` shows something (not a blank page); logs its size and colour counts. */
export function assertDrawn(png: string): void {
  const stats = pngStats(png);
  console.log(`# screenshot ${png}: ${stats.width}x${stats.height}, ${(stats.nonWhite * 100).toFixed(1)}% non-white, ${stats.colors} colors`);
  assert.ok(stats.nonWhite > 0.02 && stats.colors > 50, `the screenshot is not blank: ${JSON.stringify(stats)}`);
}

/** Lines of logs that say something went wrong (an executor's exit, an error, a takeover). */
const TROUBLE = /error|exception|traceback|killed|exit|restart|took over|takeover|lost|timed out|refused/i;

/**
 * What a failed notebook test leaves to read: every run's steps under
 * `home/runs` (reward, policy and weights versions, groups kept, calls) and
 * the lines of the head's, agents' and executors' logs that name trouble.
 */
export function failureReport(cluster: TestCluster, home: string): string {
  const out: string[] = [];
  const runs = path.join(home, "runs");
  for (const name of existsSync(runs) ? readdirSync(runs) : []) {
    const file = path.join(runs, name, "metrics.jsonl");
    if (!existsSync(file)) continue;
    out.push(`run ${name}:`);
    for (const line of readFileSync(file, "utf8").split("\n").filter(Boolean)) {
      try {
        const m = JSON.parse(line) as Record<string, unknown>;
        const calls = Object.keys(m).find((k) => k.endsWith("_per_sample"));
        out.push(`  step ${String(m.step)}: reward ${String(m.reward_mean)}, policy v${String(m.policy_version)}, weights v${String(m.weights_version)}, groups kept ${String(m.groups_kept)}/${Number(m.groups_kept) + Number(m.groups_dropped)}${calls ? `, ${calls} ${String(m[calls])}` : ""}${m.loss !== undefined ? `, loss ${String(m.loss)}` : ""}`);
      } catch {
        out.push(`  (not JSON) ${line.slice(0, 200)}`);
      }
    }
  }
  const trouble = (text: string): string[] => text.split("\n").filter((l) => TROUBLE.test(l)).slice(-15);
  out.push("head and agents:", ...trouble(cluster.headLog()).map((l) => `  ${l}`));
  for (const agent of existsSync(cluster.dir) ? readdirSync(cluster.dir) : []) {
    const logs = path.join(cluster.dir, agent, "logs");
    for (const f of existsSync(logs) ? readdirSync(logs).sort() : []) {
      const lines = trouble(readFileSync(path.join(logs, f), "utf8"));
      if (lines.length > 0) out.push(`${agent}/${f}:`, ...lines.map((l) => `  ${l}`));
    }
  }
  return out.join("\n");
}
