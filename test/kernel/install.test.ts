// `hearth kernel install/uninstall` through the real CLI, into a temporary prefix.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { REPO_ROOT } from "./bridge.js";

const run = promisify(execFile);
const CLI = path.join(REPO_ROOT, "dist", "cluster-agent", "cli.js");

test("install writes a kernelspec whose argv runs this checkout's CLI; uninstall removes it", async () => {
  const prefix = mkdtempSync(path.join(tmpdir(), "hearth-install-"));
  try {
    const out = await run(process.execPath, [CLI, "kernel", "install", "--prefix", prefix, "--name", "hearth-x"], { timeout: 30_000 });
    const file = path.join(prefix, "share", "jupyter", "kernels", "hearth-x", "kernel.json");
    assert.match(out.stdout, /installed kernelspec/);
    const spec = JSON.parse(readFileSync(file, "utf8")) as { argv: string[]; language: string; interrupt_mode: string; env: Record<string, string> };
    assert.equal(spec.language, "typescript");
    assert.equal(spec.interrupt_mode, "signal");
    assert.deepEqual(spec.argv.slice(2), ["kernel", "run", "--connection-file", "{connection_file}"]);
    assert.equal(spec.argv[0], process.execPath);
    assert.ok(path.isAbsolute(spec.argv[1]!) && existsSync(spec.argv[1]!), "argv names the compiled CLI by absolute path");
    // `import "hearth"` from any folder: NODE_PATH holds a link named hearth to this checkout.
    const nodePath = path.join(path.dirname(file), "node_modules");
    assert.deepEqual(spec.env, { NODE_PATH: nodePath });
    assert.equal(realpathSync(path.join(nodePath, "hearth")), realpathSync(REPO_ROOT));

    await run(process.execPath, [CLI, "kernel", "uninstall", "--prefix", prefix, "--name", "hearth-x"], { timeout: 30_000 });
    assert.equal(existsSync(file), false);
    assert.ok(existsSync(path.join(REPO_ROOT, "package.json")), "uninstall removes the link, not the checkout");
    await assert.rejects(run(process.execPath, [CLI, "kernel", "install", "--user", "--prefix", prefix], { timeout: 30_000 }), /exclude each other/);
  } finally {
    rmSync(prefix, { recursive: true, force: true });
  }
});
