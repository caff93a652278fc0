/**
 * Project packaging to an agent that cannot read the driver's folder (it runs
 * as another user, as on another node): the project travels through the
 * object cache, honouring .gitignore and never node_modules, is unpacked once
 * per content hash, and its dependency — a local tarball — is installed from
 * the lockfile before the executor imports the service module.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { listProjectFiles, parseGitignore } from "../../sdk/runtime/project.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

const NOBODY = 65534;
let cluster: TestCluster;
let project: string;

function makeProject(): string {
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-userproj-"));
  const greeter = path.join(work, "greeter");
  const proj = path.join(work, "proj");
  mkdirSync(greeter);
  mkdirSync(path.join(proj, "vendor"), { recursive: true });
  writeFileSync(path.join(greeter, "package.json"), JSON.stringify({ name: "greeter", version: "1.0.0", type: "module", main: "index.js" }));
  writeFileSync(path.join(greeter, "index.js"), "export function greet(n) { return `hello, ${n}, from a tarball`; }\n");
  execFileSync("npm", ["pack", "--pack-destination", path.join(proj, "vendor")], { cwd: greeter, stdio: "ignore" });
  writeFileSync(
    path.join(proj, "package.json"),
    JSON.stringify({ name: "userproj", version: "1.0.0", type: "module", dependencies: { greeter: "file:vendor/greeter-1.0.0.tgz" } }),
  );
  execFileSync("npm", ["install", "--package-lock-only", "--offline", "--no-audit", "--no-fund"], { cwd: proj, stdio: "ignore" });
  mkdirSync(path.join(proj, "services"));
  writeFileSync(
    path.join(proj, "services", "greeter-service.js"),
    [
      'import { greet } from "greeter";',
      'import { readdirSync } from "node:fs";',
      'import path from "node:path";',
      'import { fileURLToPath } from "node:url";',
      "const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');",
      "export class GreeterService {",
      "  hello(name) { return greet(name); }",
      "  where() { return { root, uid: process.getuid(), files: readdirSync(root).sort(), modules: readdirSync(path.join(root, 'node_modules')).sort() }; }",
      "}",
      "",
    ].join("\n"),
  );
  writeFileSync(path.join(proj, ".gitignore"), "secret.txt\nbuild/\n");
  writeFileSync(path.join(proj, "secret.txt"), "not for agents");
  mkdirSync(path.join(proj, "build"));
  writeFileSync(path.join(proj, "build", "out.js"), "ignored");
  mkdirSync(path.join(proj, "node_modules", "fake"), { recursive: true });
  writeFileSync(path.join(proj, "node_modules", "fake", "index.js"), "never shipped");
  chmodSync(work, 0o700); // the agent's user cannot read any of it
  return proj;
}

before(async () => {
  project = makeProject();
  cluster = await startCluster({ agents: [{ id: "remote", cpus: 2, mem: "2g", uid: NOBODY, gid: NOBODY }] });
});

after(async () => {
  await cluster?.stop();
});

test(".gitignore rules: anchored, basename, dir-only, ** and negation", () => {
  const rules = parseGitignore("# c\n*.log\n/build/\ndocs/**/draft.md\n!keep.log\n");
  const hit = (p: string, dir = false): boolean => {
    let out = false;
    for (const r of rules) if ((!r.dirOnly || dir) && r.re.test(p)) out = !r.negate;
    return out;
  };
  assert.ok(hit("a.log") && hit("x/y/a.log"));
  assert.ok(!hit("keep.log"));
  assert.ok(hit("build", true) && !hit("src/build", true) && !hit("build", false));
  assert.ok(hit("docs/a/b/draft.md") && hit("docs/draft.md"));
  assert.deepEqual(listProjectFiles(project), ["package-lock.json", "package.json", "services/greeter-service.js", "vendor/greeter-1.0.0.tgz", ".gitignore"].sort());
});

test("an agent that cannot read the driver's folder runs the shipped project with its tarball dependency", async () => {
  const denied = spawnSync(process.execPath, ["-e", `require("fs").readdirSync(${JSON.stringify(project)})`], { uid: NOBODY, gid: NOBODY });
  assert.notEqual(denied.status, 0, "precondition: the agent's user cannot read the project");

  const app = await connect({ name: "shipped", head: cluster.endpoint, project });
  try {
    const ref = { module: path.join(project, "services", "greeter-service.js"), export: "GreeterService" };
    const svc = await app.service<any>(ref, { resreq: "cpu=0.5" });
    assert.equal(await svc.call("hello", "hearth"), "hello, hearth, from a tarball");
    const where = (await svc.call("where")) as { root: string; uid: number; files: string[]; modules: string[] };
    assert.equal(where.uid, NOBODY);
    assert.notEqual(where.root, project, "imported from the agent's own copy");
    assert.ok(where.files.includes("services") && where.files.includes("node_modules"));
    assert.ok(!where.files.includes("secret.txt") && !where.files.includes("build"), `ignored files were shipped: ${where.files.join(",")}`);
    assert.deepEqual(where.modules.filter((m) => !m.startsWith(".")), ["greeter"], "node_modules came from npm ci, not from the driver");

    // A second service from the same project reuses the unpacked copy.
    const again = await app.service<any>(ref, { name: "second", resreq: "cpu=0.5" });
    assert.equal(((await again.call("where")) as { root: string }).root, where.root);
    assert.equal(cluster.headLog().match(/files unpacked and installed/g)?.length, 1, "unpacked and installed once per hash");
  } finally {
    await app.close();
  }
});
