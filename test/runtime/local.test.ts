/**
 * The embedded default: connect() with no endpoint starts a local head and
 * agent in the background, later drivers find them, and `hearth status` /
 * `hearth down` work on them.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { promisify } from "node:util";
import { connect } from "../../sdk/connect.js";
import { findLocalCluster } from "../../sdk/engines/local.js";
import { CLI, FIXTURES, pidAlive, waitFor } from "../helpers/cluster.js";
import type { Counter } from "../fixtures/services.js";

const run = promisify(execFile);
// The defaults of sdk/runtime/process-tuning.ts are what these tests check.
delete process.env.HEARTH_NODE_FLAGS;
delete process.env.MALLOC_ARENA_MAX;
delete process.env.MALLOC_MMAP_THRESHOLD_;
delete process.env.MALLOC_TRIM_THRESHOLD_;
const home = mkdtempSync(path.join(os.tmpdir(), "hearth-home-"));
const env: NodeJS.ProcessEnv = { ...process.env, HEARTH_HOME: home };
delete env.HEARTH_HEAD;

after(async () => {
  await run(process.execPath, [CLI, "down"], { env }).catch(() => undefined);
});

test("connect() without an endpoint starts the local head and agent, which outlive the driver", async () => {
  const app = await connect({ name: "embedded", local: { home } });
  const counter = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=0.5" });
  assert.equal(await counter.call("add", 4), 4);
  const executorPid = (await counter.call("get")).pid;
  await app.disconnect();
  const cluster = findLocalCluster(home)!;
  assert.ok(cluster, "the state file names the running local cluster");
  assert.ok(pidAlive(cluster.headPid) && pidAlive(cluster.agentPid));
  // hearth's own processes bound V8's young generation and glibc's arenas (long runs hold steady: docs/results.md, soak),
  // and keep object chunks in the heap (no fresh mapping per 8 MiB chunk).
  for (const [what, pid] of [["head", cluster.headPid], ["agent", cluster.agentPid], ["executor", executorPid]] as const) {
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    const environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
    assert.ok(argv.includes("--max-semi-space-size=2"), `the ${what} runs with --max-semi-space-size=2: ${argv.join(" ")}`);
    assert.ok(environ.includes("MALLOC_ARENA_MAX=2"), `the ${what} runs with MALLOC_ARENA_MAX=2`);
    assert.ok(environ.includes(`MALLOC_MMAP_THRESHOLD_=${32 * 1024 * 1024}`), `the ${what} runs with a 32 MiB mmap threshold`);
    assert.ok(environ.includes(`MALLOC_TRIM_THRESHOLD_=${128 * 1024 * 1024}`), `the ${what} runs with a 128 MiB trim threshold`);
  }

  const again = await connect({ name: "embedded", local: { home } });
  assert.equal(again.endpoint, cluster.endpoint, "a second connect finds the same head");
  assert.equal(again.reattached, true);
  const same = await again.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=0.5" });
  assert.equal(await same.call("add", 1), 5, "still warm");
  await again.disconnect();

  const { stdout } = await run(process.execPath, [CLI, "status"], { env });
  assert.match(stdout, /agents: 1/);
  assert.match(stdout, /embedded: 0 driver\(s\)/);
  assert.match(stdout, /Counter \[pool, ready\]/);

  const down = await run(process.execPath, [CLI, "down"], { env });
  assert.match(down.stdout, /stopped the local head and agent/);
  await waitFor("local processes to exit", () => (!pidAlive(cluster.headPid) && !pidAlive(cluster.agentPid) ? true : undefined));
  assert.equal(findLocalCluster(home), undefined);
});

test("kill -9 of the embedded head: the next connect() restarts it on the same endpoint and data dir, and the executor is still warm", async () => {
  const ref = { module: FIXTURES, export: "Counter" };
  const app = await connect({ name: "survivor", local: { home } });
  const counter = await app.service<Counter>(ref, { resreq: "cpu=0.5" });
  await counter.call("add", 4);
  const before = await counter.call("get");
  await app.disconnect();
  const crashed = findLocalCluster(home)!;
  process.kill(crashed.headPid, "SIGKILL");
  await waitFor("the head to die", () => (pidAlive(crashed.headPid) ? undefined : true));

  const again = await connect({ name: "survivor", local: { home } });
  const restarted = findLocalCluster(home)!;
  assert.notEqual(restarted.headPid, crashed.headPid, "a new head");
  assert.equal(restarted.endpoint, crashed.endpoint, "on the same endpoint");
  assert.equal(restarted.agentPid, crashed.agentPid, "with the same agent");
  assert.equal(again.reattached, true, "the app was restored from the data dir");
  const same = await again.service<Counter>(ref, { resreq: "cpu=0.5" });
  assert.deepEqual(await same.call("get"), before, "same executor, pid and counter; init ran once");
  await again.disconnect();
  await run(process.execPath, [CLI, "down"], { env });
  await waitFor("local processes to exit", () => (!pidAlive(restarted.headPid) && !pidAlive(restarted.agentPid) ? true : undefined));
});

test("hearth up / status / down from the command line", async () => {
  const up = await run(process.execPath, [CLI, "up", "--cpus", "2", "--gpus", "1"], { env });
  assert.match(up.stdout, /started: head tcp:\/\/127\.0\.0\.1:\d+/);
  const again = await run(process.execPath, [CLI, "up"], { env });
  assert.match(again.stdout, /already running/);
  const { stdout } = await run(process.execPath, [CLI, "status", "--json"], { env });
  const st = JSON.parse(stdout);
  assert.deepEqual(st.agents[0].total.gpus, ["0"]);
  assert.equal(st.agents[0].total.cpu, 2);
  // The embedded default is one user's: its executors run as that user (and status says what that means).
  assert.equal(st.agents[0].isolation.mode, "shared-user");
  assert.equal(st.agents[0].isolation.uid, process.geteuid!());
  await run(process.execPath, [CLI, "down"], { env });
  const bad = await run(process.execPath, [CLI, "up", "--executor-uids", "7-3"], { env }).then(() => undefined, (e: { stderr: string }) => e);
  assert.match(bad!.stderr, /--executor-uids must be FIRST-LAST/);
  const none = await run(process.execPath, [CLI, "down"], { env });
  assert.match(none.stdout, /no local head is running/);
});

test("connecting to an endpoint where no head runs is a clear ConnectError", async () => {
  await assert.rejects(connect({ name: "x", head: "tcp://127.0.0.1:1", timeoutMs: 500 }), /no hearth head answered at tcp:\/\/127\.0\.0\.1:1 within 0\.5 s/);
});
