/**
 * README's command 2 (`npm test`) does its own set-up: package.json's test
 * script runs scripts/test-setup.sh before it builds and runs the tests, and
 * the set-up checks every Debian package the tests import. Here it runs for
 * real against a Python that lacks every module: as an unprivileged user it
 * names each missing package and the one command that installs them, and
 * stops (exit 1) before any test could fail for want of them; with
 * everything present (this machine, set up by it) it does nothing.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { DIST } from "../helpers/cluster.js";

const ROOT = path.join(DIST, "..");
const SETUP = path.join(ROOT, "scripts", "test-setup.sh");

test("npm test runs the set-up first", () => {
  const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
  assert.match(pkg.scripts.test!, /^bash scripts\/test-setup\.sh && /);
});

test("without the packages and without root: each missing package named, the command to install them, exit 1", (t) => {
  if (process.getuid?.() !== 0) return t.skip("needs root to run the set-up as another user");
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-setup-"));
  chmodSync(dir, 0o755);
  const noModules = path.join(dir, "python");
  writeFileSync(noModules, "#!/bin/sh\nexit 1\n", { mode: 0o755 });
  const r = spawnSync("setpriv", ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "bash", SETUP], {
    env: { PATH: process.env.PATH, HEARTH_SETUP_PYTHON: noModules },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(r.status, 1, r.stderr);
  for (const pkg of ["python3-torch", "jupyter-client", "python3-nbclient", "python3-nbformat", "jupyter-nbconvert", "python3-ipykernel", "python3-jupyter-kernel-test"]) {
    assert.match(r.stderr, new RegExp(`sudo apt-get install -y .*\\b${pkg}\\b`), `${pkg} is named`);
  }
  assert.match(r.stderr, /then run npm test again/);
});

test("with everything present the set-up does nothing", () => {
  const r = spawnSync("bash", [SETUP], { encoding: "utf8", timeout: 120_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, "", "nothing to install on a machine it set up");
});
