/**
 * HEARTH_HOME and the cluster secret are private: made on first use by a
 * real head (folder 0700, secret 0600), refused when others can read them,
 * and the embedded default writes nothing others can read: a walk of a
 * used HEARTH_HOME (an executor, a shipped project, objects) finds every
 * folder 0700 and every file 0600.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { connect } from "../../sdk/connect.js";
import { ensureLocalCluster, stopLocalCluster } from "../../sdk/engines/local.js";
import { CLI, pidAlive, waitFor } from "../helpers/cluster.js";

const mode = (p: string): number => statSync(p).mode & 0o777;

/** Runs `hearth head` with HEARTH_HOME=home until it listens (or exits); returns its output and exit code. */
async function runHead(home: string): Promise<{ out: string; code: number | null }> {
  const p = spawn(process.execPath, [CLI, "head", "--bind", "tcp://127.0.0.1:0"], { env: { ...process.env, HEARTH_HOME: home, HEARTH_SECRET_FILE: "" }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  p.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  p.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => p.once("exit", (code) => r(code)));
  const first = await Promise.race([waitFor("the head to listen", () => (/listening on/.test(out) ? "up" : undefined), 15_000), exited.then(() => "exited")]);
  if (first === "up") {
    p.kill("SIGTERM");
    return { out, code: await exited };
  }
  return { out, code: await exited };
}

test("the head makes HEARTH_HOME (0700) and its secret (0600) on first use", async () => {
  const home = path.join(mkdtempSync(path.join(os.tmpdir(), "hearth-sec-home-")), "home");
  const { out } = await runHead(home);
  assert.match(out, /listening on tcp:\/\//);
  assert.equal(mode(home), 0o700);
  assert.equal(mode(path.join(home, "secret")), 0o600);
});

test("a secret others can read is refused with the command that fixes it", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "hearth-sec-home-"));
  writeFileSync(path.join(home, "secret"), `${"ab".repeat(32)}\n`);
  chmodSync(path.join(home, "secret"), 0o644);
  const { out, code } = await runHead(home);
  assert.notEqual(code, 0);
  assert.match(out, /mode 0644; others can read it\. Run: chmod 600/);
});

test("the embedded default keeps everything under HEARTH_HOME private, and `down` (admin) stops it", { timeout: 120_000 }, async () => {
  const home = path.join(mkdtempSync(path.join(os.tmpdir(), "hearth-sec-home-")), "home");
  mkdirSync(home, { mode: 0o755 });
  // A shipped project (a file others could read, in a subfolder) and a service from it, so the agent unpacks and logs.
  const project = mkdtempSync(path.join(os.tmpdir(), "hearth-sec-project-"));
  writeFileSync(path.join(project, "package.json"), JSON.stringify({ name: "private-proj", version: "1.0.0", type: "module" }), { mode: 0o644 });
  mkdirSync(path.join(project, "lib"), { mode: 0o755 });
  writeFileSync(path.join(project, "lib", "echo.js"), "export class Echo { ping() { return 'pong'; } }\n", { mode: 0o644 });
  // As root, with a uid range (the embedded default's executors run as the user unless given one): each app's as its own user.
  const isolated = process.geteuid?.() === 0;
  const c = await ensureLocalCluster({ home, cpus: 1, mem: "512m", executorUids: isolated ? "2013265920-2080374783" : undefined });
  let executorUid = -1;
  try {
    const app = await connect({ name: "private", local: { home, cpus: 1, mem: "512m" }, project });
    try {
      const pool = await app.service<{ ping(): string }>({ module: path.join(project, "lib", "echo.js"), export: "Echo" }, { name: "echo", warmup: 1 });
      assert.equal(await pool.call("ping"), "pong");
      await app.objects.put(Buffer.alloc(1024), { key: "bytes" });
      executorUid = statSync(`/proc/${(await pool.members())[0]!.pid}`).uid;
    } finally {
      await app.close();
    }
    const walk = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? [path.join(dir, e.name), ...walk(path.join(dir, e.name))] : [path.join(dir, e.name)]));
    assert.equal(mode(home), 0o700, "an existing home is made private");
    for (const f of ["secret", "local.json", "processes.json", "head.endpoint", "logs/head.log", "logs/agent.log"]) assert.equal(mode(path.join(home, f)), 0o600, f);
    const all = walk(home);
    // Isolated, the agent unpacks a project where only its app's executors (their own user) can read it, not under HEARTH_HOME.
    for (const part of ["agent/logs", ...(isolated ? [] : ["agent/projects"]), "data/objects", "data/runtime"]) assert.ok(all.some((p) => p.includes(`${path.sep}${part}`)), `${part} was written (the walk covers it)`);
    // Every folder 0700 and every file 0600, however deep: executor logs, unpacked projects, objects, state.
    const wrong = all.filter((p) => mode(p) !== (statSync(p).isDirectory() ? 0o700 : 0o600)).map((p) => `${path.relative(home, p)} 0${mode(p).toString(8)}`);
    assert.deepEqual(wrong, [], "everything under HEARTH_HOME is private");
    if (isolated) {
      assert.notEqual(executorUid, 0, "the executor ran as its app's own user");
      const projects = path.join(os.tmpdir(), "hearth-executors", `u${executorUid}`, "projects");
      const unpacked = walk(projects);
      assert.ok(unpacked.some((p) => p.endsWith(`${path.sep}echo.js`)), `the project was unpacked under ${projects}`);
      // Root's files, readable (not writable) by the app's group only: nothing for other users, nothing its executors can change.
      const loose = [projects, ...unpacked].filter((p) => {
        const st = statSync(p);
        return st.uid !== 0 || st.gid !== executorUid || (st.mode & 0o027) !== 0;
      });
      assert.deepEqual(loose.map((p) => `${p} ${statSync(p).uid}:${statSync(p).gid} 0${mode(p).toString(8)}`), [], "the unpacked project is root's, readable by its app's group only");
    }
  } finally {
    assert.equal(await stopLocalCluster(home), true);
  }
  await waitFor("the local head and agent to exit", () => (!pidAlive(c.headPid) && !pidAlive(c.agentPid) ? true : undefined));
});
