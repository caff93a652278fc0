/**
 * The test runner (scripts/run-tests.mjs) counts skips and never as passes:
 * run on fixture suites (node tests and a Python unittest suite, really run),
 * its summary reads `tests: N passed, N failed, N skipped` and lists each
 * skipped test with its reason; in CI (CI=true) as root a skip whose reason
 * is not on its allow-list (no GPU) fails the run, naming the test.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { DIST } from "../helpers/cluster.js";

const RUNNER = path.join(DIST, "..", "scripts", "run-tests.mjs");

/** A fixture: node test files and a Python engine test folder. */
function fixture(node: Record<string, string>, python: string): { testsDir: string; engineDir: string } {
  const root = mkdtempSync(path.join(os.tmpdir(), "hearth-runner-"));
  const testsDir = path.join(root, "dist-test");
  const engineDir = path.join(root, "engine");
  mkdirSync(testsDir);
  mkdirSync(path.join(engineDir, "tests"), { recursive: true });
  for (const [name, body] of Object.entries(node)) writeFileSync(path.join(testsDir, name), `import { test } from "node:test";\n${body}\n`);
  writeFileSync(path.join(engineDir, "tests", "test_fixture.py"), `import unittest\n\n${python}\n`);
  return { testsDir, engineDir };
}

/** Runs the runner on a fixture; resolves with its exit code and output. */
function runRunner(f: { testsDir: string; engineDir: string }, env: Record<string, string | undefined>): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    // NODE_TEST_CONTEXT would make the runner's node --test think it is nested in this one and run nothing.
    const childEnv: NodeJS.ProcessEnv = { ...process.env, HEARTH_TESTS_DIR: f.testsDir, HEARTH_TEST_ENGINE_DIR: f.engineDir, HEARTH_PYTHON: "/usr/bin/python3", CI: undefined, NODE_TEST_CONTEXT: undefined, ...env };
    for (const k of Object.keys(childEnv)) if (childEnv[k] === undefined) delete childEnv[k];
    const p = spawn(process.execPath, [RUNNER], { cwd: f.testsDir, env: childEnv, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    p.stdout.on("data", (d: Buffer) => (out += d.toString()));
    p.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill("SIGKILL"), 60_000);
    p.on("close", (code) => (clearTimeout(timer), resolve({ code, out })));
  });
}

const PY_GPU_SKIP = `class GpuTest(unittest.TestCase):
    def test_runs(self):
        self.assertEqual(1 + 1, 2)

    @unittest.skip("CUDA is not available")
    def test_on_gpu(self):
        pass
`;

const root = process.getuid?.() === 0;

test("skips are counted and listed with their reasons, never as passes; a GPU skip is allowed in CI", { timeout: 120_000 }, async () => {
  const f = fixture(
    { "a.test.js": `test("runs", () => {});\ntest("uses the GPU", { skip: "no GPU on this machine" }, () => {});\ntest("outer", async (t) => { await t.test("inner runs", () => {}); });` },
    PY_GPU_SKIP,
  );
  const local = await runRunner(f, {});
  assert.equal(local.code, 0, local.out);
  assert.match(local.out, /^tests: 4 passed, 0 failed, 2 skipped$/m, "node: runs, outer, inner; python: test_runs");
  assert.match(local.out, /skip: a\.test\.js > uses the GPU — no GPU on this machine/);
  assert.match(local.out, /skip: test_fixture\.GpuTest\.test_on_gpu — CUDA is not available/);
  if (root) {
    const ci = await runRunner(f, { CI: "true" });
    assert.equal(ci.code, 0, `GPU skips are allowed in CI:\n${ci.out}`);
  }
});

test("in CI as root, any other skip (or todo) fails the run and names the test and its reason", { timeout: 120_000, skip: root ? false : "the CI rule applies to runs as root" }, async () => {
  const f = fixture(
    {
      "b.test.js": `test("runs", () => {});\ntest("renders in a browser", { skip: "no /usr/bin/chromium" }, () => {});\ntest("not yet", { todo: "write it" }, () => {});`,
    },
    `${PY_GPU_SKIP}
class SlowTest(unittest.TestCase):
    def test_slow(self):
        """A docstring line: unittest -v prints it after the test id."""
        self.skipTest("too slow for today")
`,
  );
  const local = await runRunner(f, {});
  assert.equal(local.code, 0, `outside CI, skips are reported, not fatal:\n${local.out}`);
  assert.match(local.out, /^tests: 2 passed, 0 failed, 4 skipped$/m);
  const ci = await runRunner(f, { CI: "true" });
  assert.equal(ci.code, 1, ci.out);
  assert.match(ci.out, /CI \(CI=true, as root\): 3 test\(s\) skipped for a reason CI does not allow/);
  assert.match(ci.out, /^ {2}b\.test\.js > renders in a browser — no \/usr\/bin\/chromium$/m);
  assert.match(ci.out, /^ {2}b\.test\.js > not yet — write it$/m);
  assert.match(ci.out, /^ {2}test_fixture\.SlowTest\.test_slow — too slow for today$/m);
  assert.doesNotMatch(ci.out, /^ {2}test_fixture\.GpuTest\.test_on_gpu/m, "the GPU skip is allowed");
  assert.match(ci.out, /^tests: 2 passed, 0 failed, 4 skipped$/m);
});

test("every test process, Python's too, writes its temp files in one folder of the run's, removed at the end (kept with HEARTH_TEST_KEEP=1)", { timeout: 120_000 }, async () => {
  // Each suite leaves a file in its temp folder and reports where that was.
  const f = fixture(
    { "t.test.js": `import { mkdtempSync } from "node:fs";\nimport os from "node:os";\nimport path from "node:path";\ntest("leaves a folder", () => { console.log("NODE-LEFT " + mkdtempSync(path.join(os.tmpdir(), "left-"))); });` },
    `import tempfile


class LeftTest(unittest.TestCase):
    def test_leaves(self):
        print("PY-LEFT " + tempfile.mkdtemp(prefix="left-"), flush=True)
`,
  );
  const left = (out: string): string[] => [...out.matchAll(/(?:NODE|PY)-LEFT (\S+)/g)].map((m) => m[1]!);
  const cleaned = await runRunner(f, {});
  assert.equal(cleaned.code, 0, cleaned.out);
  const dirs = left(cleaned.out);
  assert.equal(dirs.length, 2, `both suites reported their folder:\n${cleaned.out}`);
  for (const d of dirs) {
    assert.match(path.dirname(d), /\/hearth-tests-[^/]+$/, `${d} is in the run's temp folder, not ${os.tmpdir()} itself`);
    assert.equal(existsSync(d), false, `${d} went with the run's folder`);
  }
  assert.equal(existsSync(path.dirname(dirs[0]!)), false, "the run's folder is gone");
  const kept = await runRunner(f, { HEARTH_TEST_KEEP: "1" });
  const keptDir = /^kept the tests' temp folder: (\S+)$/m.exec(kept.out)?.[1];
  assert.ok(keptDir, kept.out);
  for (const d of left(kept.out)) assert.ok(existsSync(d) && d.startsWith(`${keptDir}/`), `${d} was kept in ${keptDir}`);
  rmSync(keptDir, { recursive: true, force: true });
});
