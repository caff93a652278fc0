/**
 * A head or an agent loads what it runs, not the CLI's other commands: the
 * notebook kernel, the training loops and the demo are imported only when
 * their command runs. Statically imported, the kernel's modules alone put
 * ~21 MB of source text and code in every head's and agent's heap, which
 * each full garbage collection walked (a busy node cache runs one per ~32 MiB
 * received: the object chunks it gets are external memory).
 *
 * Every module a process loads is recorded by a loader hook (`--import`);
 * all of `cli.js`'s static imports are loaded before its `main` runs, so a
 * command that fails at once on its flags has loaded them all.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { CLI, DIST } from "../helpers/cluster.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-cli-modules-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const hooks = path.join(dir, "hooks.mjs");
writeFileSync(hooks, `import { appendFileSync } from "node:fs";\nexport async function load(url, context, next) {\n  if (url.startsWith("file:")) appendFileSync(process.env.HEARTH_TEST_MODULE_LOG, url + "\\n");\n  return next(url, context);\n}\n`);
const register = path.join(dir, "register.mjs");
writeFileSync(register, `import { register } from "node:module";\nregister(${JSON.stringify(new URL(`file://${hooks}`).href)});\n`);

/** The project's modules (paths under dist/) that `hearth <args>` loaded. */
async function modulesOf(name: string, args: string[]): Promise<string[]> {
  const log = path.join(dir, `${name}.log`);
  writeFileSync(log, "");
  await new Promise<void>((resolve, reject) => {
    const p = spawn(process.execPath, ["--import", register, CLI, ...args], { stdio: "ignore", env: { ...process.env, HEARTH_TEST_MODULE_LOG: log, HEARTH_HOME: dir } });
    const timer = setTimeout(() => (p.kill("SIGKILL"), reject(new Error(`hearth ${args.join(" ")} did not exit within 30 s`))), 30_000);
    p.on("exit", () => (clearTimeout(timer), resolve()));
  });
  const root = new URL(`file://${DIST}/`).href;
  return readFileSync(log, "utf8")
    .split("\n")
    .filter((u) => u.startsWith(root))
    .map((u) => u.slice(root.length));
}

const NOT_FOR_NODES = [/^kernel\//, /^sdk\/notebook\//, /^sdk\/rl\//, /^sdk\/envs\//, /^cluster-agent\/demo/];

test("`hearth agent` and `hearth head` load neither the kernel, the notebook views, the RL layer nor the demo", async () => {
  for (const [name, args] of [
    ["agent", ["agent"]], // no --head: fails on its flags, after every static import loaded
    ["head", ["head", "--bind", "not-an-endpoint"]],
  ] as const) {
    const loaded = await modulesOf(name, [...args]);
    assert.ok(loaded.includes("cluster-agent/cli.js") && loaded.includes("cluster-agent/agent.js") && loaded.includes("cluster-agent/head/head.js"), `the hook saw ${name}'s own modules (${loaded.length} loaded)`);
    const extra = loaded.filter((m) => NOT_FOR_NODES.some((re) => re.test(m)));
    assert.deepEqual(extra, [], `hearth ${name} loaded modules only other commands need`);
  }
});

test("the help still names every command's flags (their modules load for it)", async () => {
  const loaded = await modulesOf("help", ["help"]);
  for (const m of ["sdk/rl/cli/train-cli.js", "sdk/rl/cli/warmstart-cli.js", "sdk/rl/cli/runs-cli.js", "sdk/rl/cli/replay-cli.js", "cluster-agent/model-cli.js"]) assert.ok(loaded.includes(m), `help loaded ${m}`);
  const out = await new Promise<string>((resolve) => {
    const p = spawn(process.execPath, [CLI, "help"], { stdio: ["ignore", "pipe", "ignore"] });
    let s = "";
    p.stdout.on("data", (d: Buffer) => (s += d.toString()));
    p.on("exit", () => resolve(s));
  });
  // A line of each command's own usage text.
  for (const line of ["usage: hearth train search-r1", "usage: hearth warmstart", "replay  RUN --step N", "runs    [--head ENDPOINT]", "model init --preset NAME"]) assert.ok(out.includes(line), `the help has '${line}'`);
});
