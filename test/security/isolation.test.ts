/**
 * An app token opens its app only, on a real head, agent (run as root, as
 * in CI) and executors: a driver holding nothing but app A's token declares
 * a service whose code tries to read the cluster secret, HEARTH_HOME, the
 * agent's work dir (other executors' logs), the agent's environment and
 * another app's executor's environment (its executor token), and another
 * app's files (a world-readable file that app's executor wrote in its HOME
 * included); every read is refused, while the executor still reaches the
 * head and the node cache and gets a shipped folder from a folder only root
 * can read. An agent that cannot change user (not root) says so in the
 * head's status, and refuses --executor-uids.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chownSync, copyFileSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import { shipFolder } from "../../sdk/cache/folder.js";
import { appToken, loadSecret, secretFile, type Credential } from "../../sdk/wire/auth.js";
import { CLI, DIST, executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import type { Prober } from "./services.js";

const PROBER = { module: path.join(DIST, "test/security/services.js"), export: "Prober" };
const root = process.geteuid?.() === 0;
const skip = root ? false : "needs root: the agent starts executors as other users";

let cluster: TestCluster;
let a: App;
let b: App;
let probeA: PoolHandle<Prober>;
let probeB: PoolHandle<Prober>;

/** A driver that holds only `app`'s token (what `hearth token APP` prints), not the secret. */
function tokenOnly(app: string): Credential {
  return { role: "driver", id: app, app, key: Buffer.from(appToken(loadSecret(secretFile()), app), "hex") };
}

before(async () => {
  if (!root) return;
  process.env.HEARTH_SECRET_FILE = secretFile();
  // The agent's default as root: each app's executors as a user of that app alone.
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 4, mem: "2g" }] });
  a = await connect({ name: "iso-a", head: cluster.endpoint, credential: tokenOnly("iso-a") });
  b = await connect({ name: "iso-b", head: cluster.endpoint, credential: tokenOnly("iso-b") });
  probeA = await a.service<Prober>(PROBER, { name: "probe", warmup: 1 });
  probeB = await b.service<Prober>(PROBER, { name: "probe", warmup: 1 });
});

after(async () => {
  await a?.close().catch(() => undefined);
  await b?.close().catch(() => undefined);
  await cluster?.stop();
});

test("an app's executor reads neither the secret, HEARTH_HOME, the agent's state, nor another app's executor", { skip }, async () => {
  const meA = await probeA.call("whoami");
  const meB = await probeB.call("whoami");
  const [xB] = executorsOf(await cluster.status(), "iso-b", "probe");
  const agentPid = cluster.agents.get("n1")!.pid!;
  const secret = secretFile();
  const targets = [
    secret, // the cluster secret: admin of everything
    path.dirname(secret), // HEARTH_HOME (curve keys, state, logs)
    path.join(cluster.dir, "n1"), // the agent's work dir
    path.join(cluster.dir, "n1", "logs", `${xB.id}.log`), // another app's executor's log
    `/proc/${agentPid}/environ`, // the agent's environment
    `/proc/${meB.pid}/environ`, // another app's executor: its executor token
    `/proc/${meB.pid}/mem`,
    meB.home!, // another app's HOME (its shipped folders, scratch)
  ];
  const results = await probeA.call("probe", targets);
  const opened = results.filter((r) => r.outcome === "read" || r.outcome === "ENOENT");
  assert.deepEqual(opened, [], `every read is refused (EACCES/EPERM); got ${JSON.stringify(results)}`);
  assert.notEqual(meA.uid, 0, "executors do not run as root");
  assert.notEqual(meA.uid, meB.uid, "two apps' executors run as different users");
  assert.equal(meA.hearthHome, null, "no HEARTH_HOME in an executor's environment");
  // The control: the same probe reads what is its own.
  const own = await probeA.call("probe", [`/proc/${meA.pid}/environ`, meA.home!]);
  assert.deepEqual(own.map((r) => r.outcome), ["read", "read"], "an executor reads its own environment and HOME");
});

test("a file another app's executor wrote in its HOME, readable by all (0644), cannot be read: its HOME keeps it", { skip }, async () => {
  const meB = await probeB.call("whoami");
  const secretText = `iso-b's note ${Math.random()}`;
  const file = await probeB.call("plant", "note.txt", secretText);
  assert.equal(path.dirname(file), meB.home, "written in iso-b's HOME");
  assert.deepEqual(await probeB.call("readText", file), { text: secretText, outcome: "read" }, "its writer reads it back");
  const attempt = await probeA.call("readText", file);
  assert.equal(attempt.text, null, "iso-a's executor did not get its contents");
  assert.equal(attempt.outcome, "EACCES", "refused for permissions (the file exists and its own mode lets anyone read)");
});

test("an isolated executor still reaches the head and node cache, and gets a shipped folder only root could read in place", { skip }, async () => {
  await a.objects.put({ note: "mine" }, { key: "note" });
  assert.deepEqual(await probeA.call("read", "note"), { note: "mine" });
  // A folder in a root-only (0700) folder on the driver's host: not readable in place, so it comes as objects.
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-iso-folder-"));
  writeFileSync(path.join(dir, "weights.txt"), "w=1", { mode: 0o600 });
  const ref = await shipFolder(a.objects, dir, { objects: true });
  const me = await probeA.call("whoami");
  const got = await probeA.call("openShipped", ref, "weights.txt");
  assert.equal(got.text, "w=1");
  assert.equal(got.inPlace, false, "not read in place: the executor's user cannot read the driver's folder");
  // The node makes it once from its own copies, in its app's folder of the node cache (group the app's, 2750).
  assert.match(got.dir, new RegExp(`cache-n1(-[0-9a-f]{10})?/u${me.uid}/folders/`), `the node-local copy lands in the app's own folder of the node cache (${got.dir})`);
});

test("a service module its app's user cannot read is a clear error naming the file and the ways out", { skip }, async () => {
  // A project in a private (0700) folder, as mkdtemp makes it, read by the agent's isolated executors.
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-iso-private-"));
  const file = path.join(dir, "svc.js");
  writeFileSync(file, "export class Svc { ping() { return 'pong'; } }\n", { mode: 0o644 });
  await assert.rejects(
    a.service({ module: file, export: "Svc" }, { name: "private-module", warmup: 1 }),
    (err: Error) => err.message.includes(`cannot read ${file} as this executor's user`) && /ship its project \(connect\(\{ project: true \}\)\), or run the agent with --executor-uids none/.test(err.message),
  );
});

test("the status says how each agent runs executors", { skip }, async () => {
  const s = await cluster.status();
  const agent = s.agents.find((x: any) => x.id === "n1");
  assert.equal(agent.isolation.mode, "per-app-uid");
});

test("an agent that is not root says executors share its user, and refuses --executor-uids", { skip, timeout: 60_000 }, async () => {
  await cluster.addAgent({ id: "nobody", cpus: 1, mem: "512m", uid: 65534, gid: 65534 });
  const s = await cluster.status();
  const agent = s.agents.find((x: any) => x.id === "nobody");
  assert.equal(agent.isolation.mode, "shared-user");
  assert.equal(agent.isolation.uid, 65534);
  assert.match(cluster.headLog(), /WARNING: executors run as this agent's own user \(uid 65534; the agent is not root[^\n]*HEARTH_HOME and the cluster secret/);
  // Asked for per-app users without root: refused at start, saying what to do (it holds a secret it can read).
  const own = mkdtempSync(path.join(os.tmpdir(), "hearth-iso-nobody-"));
  const secret = path.join(own, "secret");
  copyFileSync(secretFile(), secret);
  chownSync(own, 65534, 65534);
  chownSync(secret, 65534, 65534);
  const args = [CLI, "agent", "--head", cluster.endpoint, "--id", "nobody2", "--work-dir", own, "--executor-uids", "100000-100999"];
  const p = spawn(process.execPath, args, { uid: 65534, gid: 65534, env: { ...process.env, HEARTH_SECRET_FILE: secret }, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  p.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  const code = await waitFor("the refused agent to exit", () => (p.exitCode !== null ? p.exitCode : undefined), 20_000);
  assert.notEqual(code, 0);
  assert.match(err, /--executor-uids needs the agent to run as root \(it starts each app's executors as that app's own user; this agent runs as uid 65534\)/);
});
