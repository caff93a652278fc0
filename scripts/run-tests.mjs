#!/usr/bin/env node
// Runs every compiled test file under dist/test with Node's test runner, then
// the tensor engine's Python tests (Debian's /usr/bin/python3, or HEARTH_PYTHON).
// Usage: node scripts/run-tests.mjs [substring filter]
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";

const filter = process.argv[2] ?? "";
const root = path.resolve("dist/test");
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir).sort()) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith(".test.js") && p.includes(filter)) files.push(p);
  }
})(root);

let failed = false;
if (files.length > 0) {
  const r = spawnSync(process.execPath, ["--test", "--test-concurrency=1", "--test-timeout=300000", ...files], { stdio: "inherit" });
  failed ||= r.status !== 0;
}

const engineTests = path.resolve("cluster-agent/engine/tests");
if (existsSync(engineTests) && (filter === "" || "engine".includes(filter) || filter.includes("engine"))) {
  const python = process.env.HEARTH_PYTHON ?? "/usr/bin/python3";
  const r = spawnSync(python, ["-m", "unittest", "discover", "-s", "tests", "-v"], { stdio: "inherit", cwd: path.resolve("cluster-agent/engine") });
  failed ||= r.status !== 0;
}
process.exit(failed ? 1 : 0);
