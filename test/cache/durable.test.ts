/**
 * A head with --data-dir reports a write only once the disk has it: the
 * part's bytes are flushed, then its name (the folder), then the manifest's
 * bytes, and only then is the manifest renamed into place (the commit
 * point), the folder flushed again and the writer told. A power loss cannot
 * be staged here, so the test watches the head's system calls (strace) and
 * checks that order for a large part (a received file), a small one and a
 * patch, and that a delete flushes the folder after removing the manifest.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fromFile } from "../../sdk/cache/object-cache.js";
import { connect } from "../../sdk/connect.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { CLI, waitFor } from "../helpers/cluster.js";
import { writePattern } from "../helpers/patterns.js";

const strace = spawnSync("strace", ["-V"]).status === 0;
const skip = strace ? false : "strace is not installed (apt-get install strace)";
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-durable-"));

after(() => rmSync(work, { recursive: true, force: true }));

/** One completed call: what it was, on which path(s), in the order the calls finished. */
interface Call {
  name: "fsync" | "rename" | "unlink";
  paths: string[];
}

/**
 * Reads an strace log (-f -y) into the calls that succeeded, in the order they
 * finished (a call split into "unfinished" and "resumed" lines by another
 * thread's call counts when it resumed).
 */
function parseLog(text: string): Call[] {
  const open = new Map<string, { name: Call["name"]; args: string }>();
  const calls: Call[] = [];
  const done = (name: Call["name"], args: string, result: string): void => {
    if (!/= 0\b/.test(result)) return;
    const paths = name === "fsync" ? [...args.matchAll(/<([^>]+)>/g)].map((m) => m[1]!) : [...args.matchAll(/"([^"]+)"/g)].map((m) => m[1]!);
    calls.push({ name, paths });
  };
  for (const line of text.split("\n")) {
    const pid = /^(?:\[pid\s+)?(\d+)\]?\s/.exec(line)?.[1] ?? "main";
    const full = /(fsync|fdatasync|renameat2|renameat|rename|unlinkat|unlink)\((.*)\)\s+(=.*)$/.exec(line);
    const unfinished = /(fsync|fdatasync|renameat2|renameat|rename|unlinkat|unlink)\((.*) <unfinished \.\.\.>$/.exec(line);
    const resumed = /<\.\.\. (\w+) resumed>(.*)\)\s+(=.*)$/.exec(line);
    const norm = (n: string): Call["name"] => (n.startsWith("rename") ? "rename" : n.startsWith("unlink") ? "unlink" : "fsync");
    if (unfinished) open.set(pid, { name: norm(unfinished[1]!), args: unfinished[2]! });
    else if (resumed) {
      const o = open.get(pid);
      open.delete(pid);
      if (o) done(o.name, o.args + resumed[2]!, resumed[3]!);
    } else if (full) done(norm(full[1]!), full[2]!, full[3]!);
  }
  return calls;
}

/** Index of the first call matching `pred` at or after `from` (-1 if none). */
function find(calls: Call[], pred: (c: Call) => boolean, from = 0): number {
  for (let i = from; i < calls.length; i++) if (pred(calls[i]!)) return i;
  return -1;
}

/** Checks one commit's order around the rename of `manifest` into place: returns the index of that rename. */
function checkCommit(calls: Call[], manifest: string, partFiles: string[], objectsDir: string, what: string): number {
  const commit = find(calls, (c) => c.name === "rename" && c.paths[1] === manifest);
  assert.ok(commit >= 0, `${what}: the manifest ${manifest} was renamed into place`);
  const before = calls.slice(0, commit);
  for (const part of partFiles) {
    // The part's file arrived under another name (received, or written for the commit) and was renamed to `part`.
    const placed = before.findLastIndex((c) => c.name === "rename" && c.paths[1] === part);
    assert.ok(placed >= 0, `${what}: ${path.basename(part)} was renamed into place before the manifest`);
    const received = calls[placed]!.paths[0]!;
    assert.ok(before.slice(0, placed).some((c) => c.name === "fsync" && c.paths[0] === received), `${what}: ${path.basename(part)}'s bytes were flushed (as ${path.basename(received)}) before it took its name`);
    assert.ok(before.slice(placed).some((c) => c.name === "fsync" && c.paths[0] === objectsDir), `${what}: the folder was flushed after ${path.basename(part)} took its name and before the manifest's rename`);
  }
  const tmp = `${manifest}.tmp`;
  assert.ok(before.some((c) => c.name === "fsync" && c.paths[0] === tmp), `${what}: the manifest's bytes were flushed before its rename`);
  assert.ok(find(calls, (c) => c.name === "fsync" && c.paths[0] === objectsDir, commit + 1) > commit, `${what}: the folder was flushed after the manifest's rename`);
  return commit;
}

test("a head with a data dir flushes parts, folder and manifest, in that order, before it reports a write; a delete flushes the folder", { skip, timeout: 120_000 }, async () => {
  const dataDir = path.join(work, "data");
  const log = path.join(work, "strace.log");
  const head = spawn("strace", ["-f", "-qq", "-y", "-o", log, "-e", "trace=fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat", process.execPath, CLI, "head", "--bind", "tcp://127.0.0.1:0", "--data-dir", dataDir], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  head.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  head.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const endpoint = await waitFor("the head's endpoint", () => /listening on (tcp:\/\/\S+)/.exec(out)?.[1], 30_000);
  const app = await connect({ name: "durable", head: endpoint });
  try {
    const big = path.join(work, "big.bin");
    writePattern(big, 12, 1);
    await app.objects.put(fromFile(big), { key: "big" });
    await app.objects.put(Buffer.alloc(2000, 1), { key: "small" });
    await app.objects.patch("small", Buffer.alloc(100, 2));
    const objectsDir = path.join(dataDir, "objects");
    const manifests = new Map(readdirSync(objectsDir).filter((f) => f.endsWith(".json")).map((f) => [(JSON.parse(readFileSync(path.join(objectsDir, f), "utf8")) as { key: string }).key.split("/")[1]!, path.join(objectsDir, f)]));
    assert.equal(await app.objects.delete("small"), 1);
    const calls = parseLog(readFileSync(log, "utf8"));
    const stem = (k: string) => manifests.get(k)!.slice(0, -".json".length);
    checkCommit(calls, manifests.get("big")!, [`${stem("big")}.1.base`], objectsDir, "put of a large part");
    const smallPut = checkCommit(calls, manifests.get("small")!, [`${stem("small")}.1.base`], objectsDir, "put of a small part");
    // The patch's manifest is renamed over the put's: look after the put's commit.
    const rest = calls.slice(smallPut + 1);
    checkCommit(rest, manifests.get("small")!, [`${stem("small")}.2.patch`], objectsDir, "patch");
    const removed = find(calls, (c) => c.name === "unlink" && c.paths.some((p) => p === manifests.get("small")));
    assert.ok(removed >= 0, "the delete removed the manifest");
    assert.ok(find(calls, (c) => c.name === "fsync" && c.paths[0] === objectsDir, removed + 1) > removed, "and flushed the folder after it");
  } finally {
    await app.close().catch(() => undefined);
    // Through the head (strace detaches from a process it did not see exit: killing strace would leave the head running).
    const admin = (await HeadClient.open(endpoint, { app: "_test-observer" }, { admin: true })).client;
    await admin.control("shutdown", {}, 5000).catch(() => undefined);
    admin.close();
    if (head.exitCode === null) await new Promise((r) => head.once("exit", r));
  }
});
