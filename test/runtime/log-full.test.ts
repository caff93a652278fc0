/**
 * Logging never takes the head down: a real head whose stderr is a full
 * disk (/dev/full: every write fails with ENOSPC), or a pipe whose reader
 * went away (EPIPE), keeps serving drivers, and its status counts the log
 * lines it had to drop and says why.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { test } from "node:test";
import { connect } from "../../sdk/connect.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { CLI, waitFor } from "../helpers/cluster.js";

/** Starts a head whose stderr is `stderr` (a descriptor or "pipe"); resolves with its endpoint. */
async function startHead(stderr: number | "pipe"): Promise<{ proc: ChildProcess; endpoint: string }> {
  const proc = spawn(process.execPath, [CLI, "head", "--bind", "tcp://127.0.0.1:0"], { stdio: ["ignore", "pipe", stderr] });
  let out = "";
  proc.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  const endpoint = await waitFor("the head's endpoint", () => /listening on (tcp:\/\/\S+)/.exec(out)?.[1]);
  return { proc, endpoint };
}

/** Makes the head log (each new app is a line), then checks it still serves and counts what it dropped. */
async function assertServesAndCounts(head: { proc: ChildProcess; endpoint: string }, code: string): Promise<void> {
  for (let i = 0; i < 3; i++) {
    const app = await connect({ name: `logged-${i}`, head: head.endpoint });
    try {
      const ref = await app.objects.put({ i }, { key: "k" });
      assert.deepEqual(await app.objects.get(ref), { i });
    } finally {
      await app.disconnect().catch(() => undefined);
    }
  }
  assert.equal(head.proc.exitCode, null, "the head is still running");
  assert.equal(head.proc.signalCode, null);
  const admin = (await HeadClient.open(head.endpoint, { app: "_test-observer" }, { admin: true })).client;
  try {
    const status: any = await admin.control("status", { all: true });
    assert.ok(status.head.log.dropped >= 3, `dropped ${status.head.log.dropped} lines; each new app logs one`);
    assert.equal(status.head.log.lastError, code);
    assert.ok(status.apps.some((a: any) => a.name === "logged-2"));
    await admin.control("shutdown", {}, 5000);
  } finally {
    admin.close();
  }
  await waitFor("the head to exit", () => (head.proc.exitCode !== null ? true : undefined), 10_000);
  assert.equal(head.proc.exitCode, 0, "it shut down cleanly when asked, not because of its log");
}

test("a head whose stderr is a full disk (/dev/full) keeps serving and counts the dropped log lines", { timeout: 60_000 }, async () => {
  const full = openSync("/dev/full", "w");
  let head: { proc: ChildProcess; endpoint: string } | undefined;
  try {
    head = await startHead(full);
    await assertServesAndCounts(head, "ENOSPC");
  } finally {
    head?.proc.kill("SIGKILL");
    closeSync(full);
  }
});

test("a head whose stderr pipe lost its reader keeps serving and counts the dropped log lines", { timeout: 60_000 }, async () => {
  let head: { proc: ChildProcess; endpoint: string } | undefined;
  try {
    head = await startHead("pipe");
    head.proc.stderr!.destroy(); // the reader goes away: the head's writes fail with EPIPE
    await assertServesAndCounts(head, "EPIPE");
  } finally {
    head?.proc.kill("SIGKILL");
  }
});
