/**
 * The CLI's training path loads no table or plotting library: importing
 * the train command (sdk/rl/cli/train-cli.js) with the shipped environments
 * (sdk/envs/registry.js) pulls neither arquero nor plotly, while the
 * notebook surface (hearth/searchr1) does. Checked in a child process whose module
 * loader records every module it resolves.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const exec = promisify(execFile);
const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** Every module URL that importing `entry` loads. */
async function modulesOf(entry: string): Promise<string[]> {
  const log = path.join(mkdtempSync(path.join(os.tmpdir(), "hearth-imports-")), "modules.txt");
  // A resolve hook (on the loader thread) appends each resolved URL to a file, synchronously, before the import goes on.
  const hook = `import { appendFileSync } from "node:fs";
let file;
export function initialize(data) { file = data.file; }
export async function resolve(s, c, next) { const r = await next(s, c); appendFileSync(file, r.url + "\\n"); return r; }`;
  const main = `import { register } from "node:module";
register("data:text/javascript," + encodeURIComponent(${JSON.stringify(hook)}), { data: { file: ${JSON.stringify(log)} } });
await import(${JSON.stringify(path.join(DIST, entry))});`;
  await exec(process.execPath, ["--input-type=module", "-e", main], { cwd: DIST });
  const urls = readFileSync(log, "utf8").trim().split("\n");
  rmSync(path.dirname(log), { recursive: true, force: true });
  return urls;
}

test("the CLI's training path loads no arquero or plotly; the notebook surface does", async () => {
  const cli = [...(await modulesOf("sdk/rl/cli/train-cli.js")), ...(await modulesOf("sdk/envs/registry.js"))];
  assert.ok(cli.some((u) => u.includes("/sdk/rl/run/run.js")), "the hook saw the run module load");
  assert.ok(cli.some((u) => u.includes("/sdk/envs/searchr1/recipes/chain.js")), "and the Search-R1 recipes");
  assert.deepEqual(cli.filter((u) => /arquero|plotly/.test(u)), [], "no table or plotting library on the CLI path");
  const notebook = await modulesOf("sdk/envs/searchr1/index.js");
  assert.ok(notebook.some((u) => u.includes("arquero")), "hearth/searchr1 loads the table library for its views");
});
