// Jupyter's own kernel test suite (Debian's python3-jupyter-kernel-test) against
// the hearth kernel, with every feature it can check configured
// (test/kernel/kernel_suite.py). It runs from a temporary folder outside the
// checkout, so its `import "hearth/notebook"` samples also check that imports
// resolve anywhere. A skipped test fails here as a failed one does.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { PYTHON, REPO_ROOT, TempKernelspec } from "./bridge.js";

/** Every test jupyter_kernel_test 0.4.5 defines; each must run and pass. */
const SUITE_TESTS = [
  "test_kernel_info",
  "test_execute_stdout",
  "test_execute_stderr",
  "test_completion",
  "test_is_complete",
  "test_pager",
  "test_error",
  "test_execute_result",
  "test_display_data",
  "test_history",
  "test_inspect",
  "test_clear_output",
];

/** The history access types the suite checks as subtests of test_history. */
const HISTORY_SUBTESTS = ["tail", "range", "search"];

interface Outcome {
  test: string;
  outcome: "pass" | "fail" | "error" | "skip";
  detail: string;
}

function runSuite(spec: TempKernelspec, cwd: string, home: string, limitMs: number): Promise<{ code: number | null; outcomes: Outcome[]; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [path.join(REPO_ROOT, "test", "kernel", "kernel_suite.py"), spec.name], {
      cwd,
      env: { ...process.env, JUPYTER_PATH: spec.jupyterPath, HEARTH_HOME: home },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the kernel test suite did not finish within ${limitMs} ms; stderr:\n${err}`));
    }, limitMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      const last = out.trim().split("\n").at(-1) ?? "";
      try {
        resolve({ code, outcomes: (JSON.parse(last) as { outcomes: Outcome[] }).outcomes, stderr: err });
      } catch {
        reject(new Error(`kernel_suite.py exited ${code} without a summary; stdout:\n${out}\nstderr:\n${err}`));
      }
    });
  });
}

test("jupyter_kernel_test: every test of the suite runs and passes, none skipped", async () => {
  const spec = new TempKernelspec();
  const cwd = mkdtempSync(path.join(tmpdir(), "hearth-suite-cwd-"));
  const home = mkdtempSync(path.join(tmpdir(), "hearth-suite-home-"));
  try {
    const { code, outcomes, stderr } = await runSuite(spec, cwd, home, 180_000);
    const bad = outcomes.filter((o) => o.outcome !== "pass");
    assert.deepEqual(bad, [], `suite outcomes other than pass:\n${bad.map((o) => `${o.test}: ${o.outcome}\n${o.detail}`).join("\n")}\n${stderr}`);
    assert.equal(code, 0);
    const passed = new Set(outcomes.map((o) => o.test));
    for (const name of SUITE_TESTS) assert.ok(passed.has(name), `${name} ran and passed`);
    for (const kind of HISTORY_SUBTESTS) {
      assert.ok(outcomes.some((o) => o.test.startsWith("test_history (") && o.test.includes(`hist_access_type='${kind}'`)), `history ${kind} was checked`);
    }
    // The history lives on disk, one file per kernel session.
    assert.deepEqual(readdirSync(path.join(home, "kernel", "history")), ["1.jsonl"]);
  } finally {
    spec.remove();
    rmSync(cwd, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  }
});
