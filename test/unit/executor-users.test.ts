/**
 * Who executors run as (cluster-agent/executor-users.ts): the flag's bad
 * input is refused saying what to write, an app's uid is the same on every
 * agent of a cluster and differs between clusters, two apps never share a
 * uid on one agent, and the folders are made with the owners and modes the
 * security model promises.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { lchownSync, lstatSync, mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DEFAULT_EXECUTOR_UIDS, ExecutorUsers, parseExecutorUids } from "../../cluster-agent/executor-users.js";

const root = process.geteuid?.() === 0;

test("--executor-uids: a range or none; anything else is refused saying what to write", () => {
  assert.equal(parseExecutorUids("none"), "none");
  assert.deepEqual(parseExecutorUids("100000-100999"), { first: 100000, count: 1000 });
  for (const bad of ["", "5", "10-5", "a-b", "100000-", "-1-5"]) assert.throws(() => parseExecutorUids(bad), /--executor-uids must be FIRST-LAST \(e\.g\. \d+-\d+\) or 'none'/, bad);
  assert.throws(() => parseExecutorUids("0-2000"), /uids must lie in 1000-2147483646 \(below 1000 are the system's users\)/);
  assert.throws(() => parseExecutorUids("2147483000-2147483647"), /uids must lie in 1000-2147483646/);
});

test("an app's uid is derived from the cluster secret: the same on every agent, different between clusters", { skip: root ? false : "needs root" }, () => {
  const dir = path.join(mkdtempSync(path.join(os.tmpdir(), "hearth-eu-")), "x");
  const secret = randomBytes(32);
  const one = ExecutorUsers.create({ secret, dir }).identityFor("app");
  const two = ExecutorUsers.create({ secret, dir }).identityFor("app");
  const other = ExecutorUsers.create({ secret: randomBytes(32), dir }).identityFor("app");
  assert.equal(one!.uid, two!.uid);
  assert.notEqual(one!.uid, other!.uid);
  assert.ok(one!.uid >= DEFAULT_EXECUTOR_UIDS.first && one!.uid < DEFAULT_EXECUTOR_UIDS.first + DEFAULT_EXECUTOR_UIDS.count);
  const st = (p: string) => lstatSync(p);
  assert.deepEqual([st(dir).uid, st(dir).mode & 0o777], [0, 0o711]);
  assert.deepEqual([st(one!.root).uid, st(one!.root).gid, st(one!.root).mode & 0o777], [0, one!.gid, 0o750]);
  assert.deepEqual([st(one!.home).uid, st(one!.home).mode & 0o777], [one!.uid, 0o700]);
  assert.deepEqual([st(one!.projects).uid, st(one!.projects).gid, st(one!.projects).mode & 0o777], [0, one!.gid, 0o750]);
});

test("two apps that land on one uid are refused, never co-hosted", { skip: root ? false : "needs root" }, () => {
  const dir = path.join(mkdtempSync(path.join(os.tmpdir(), "hearth-eu-")), "x");
  const users = ExecutorUsers.create({ secret: randomBytes(32), dir, uids: { first: 2013265920, count: 1 } });
  assert.equal(users.identityFor("a")!.uid, 2013265920);
  assert.equal(users.identityFor("a")!.uid, 2013265920, "the same app again is fine");
  assert.throws(() => users.identityFor("b"), /apps 'a' and 'b' map to the same executor uid 2013265920 on this agent; they must not share a user\. Restart the agent with a wider --executor-uids range/);
});

test("a parent folder someone else made is refused", { skip: root ? false : "needs root" }, () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-eu-")); // 0700, but make it someone else's
  lchownSync(dir, 65534, 65534);
  assert.throws(() => ExecutorUsers.create({ secret: randomBytes(32), dir }), /must be a folder owned by root that no one else can write .* owned by uid 65534/);
});
