#!/usr/bin/env node
// Runs every compiled test file under dist/test with Node's test runner, then
// the tensor engine's Python tests (Debian's /usr/bin/python3, or HEARTH_PYTHON),
// and ends with one summary line: "tests: N passed, N failed".
// Usage: node scripts/run-tests.mjs [substring filter]
import { spawn } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";

const filter = process.argv[2] ?? "";
const files = [];
(function walk(dir) {
  for (const name of readdirSync(dir).sort()) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith(".test.js") && p.includes(filter)) files.push(p);
  }
})(path.resolve("dist/test"));

/** Runs a command, streaming its output, and returns [exit code, output]. */
function run(cmd, args, opts = {}) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d) => (process.stdout.write(d), (out += d)));
    child.stderr.on("data", (d) => (process.stderr.write(d), (out += d)));
    child.on("close", (code) => resolve([code ?? 1, out]));
  });
}

let passed = 0;
let failed = 0;
let broken = false;
if (files.length > 0) {
  const [code, out] = await run(process.execPath, ["--test", "--test-concurrency=1", "--test-timeout=300000", ...files]);
  passed += Number(/^# pass (\d+)/m.exec(out)?.[1] ?? 0);
  failed += Number(/^# fail (\d+)/m.exec(out)?.[1] ?? 0);
  broken ||= code !== 0;
}

const engineDir = path.resolve("cluster-agent/engine");
if (existsSync(path.join(engineDir, "tests")) && (filter === "" || filter.includes("engine"))) {
  const python = process.env.HEARTH_PYTHON ?? "/usr/bin/python3";
  const [code, out] = await run(python, ["-m", "unittest", "discover", "-s", "tests", "-v"], { cwd: engineDir });
  const ran = Number(/^Ran (\d+) test/m.exec(out)?.[1] ?? 0);
  const bad = /FAILED \((.*)\)/.exec(out)?.[1] ?? "";
  const pyFailed = [...bad.matchAll(/(?:failures|errors)=(\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
  passed += ran - pyFailed;
  failed += pyFailed;
  broken ||= code !== 0;
}
console.log(`tests: ${passed} passed, ${failed} failed`);
process.exit(broken || failed > 0 ? 1 : 0);
