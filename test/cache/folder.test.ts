/**
 * Folders shipped through the object cache (sdk/cache/folder.ts) against a
 * real head: files split into several part objects come back byte for byte,
 * two executors on one node opening the same folder at once write one copy
 * (the second waits for the first), a folder visible on this host is read in
 * place unless objects are forced, and one shipped without objects is a
 * clear error where it is not visible.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { dropFolder, openFolder, shipFolder } from "../../sdk/cache/folder.js";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

let cluster: TestCluster;
let app: App;
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-folder-"));
const src = path.join(work, "model");

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 1, mem: "1g" }] });
  app = await connect({ name: "folders", head: cluster.endpoint });
  rmSync(src, { recursive: true, force: true });
  mkdirSync(src);
  writeFileSync(path.join(src, "config.json"), '{"hidden_size": 64}');
  writeFileSync(path.join(src, "model-00001-of-00002.safetensors"), randomBytes(300_001));
  writeFileSync(path.join(src, "model-00002-of-00002.safetensors"), randomBytes(70_000));
  writeFileSync(path.join(src, "empty.txt"), "");
});

after(async () => {
  await app?.close();
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("files split into part objects arrive byte for byte; two openers on one node write one copy", async () => {
  const ref = await shipFolder(app.objects, src, { objects: true, forceObjects: true, partBytes: 64 * 1024 });
  assert.equal(ref.files.find((f) => f.name === "model-00001-of-00002.safetensors")!.parts!.length, 5, "300,001 bytes in 64 KiB parts");
  const cacheRoot = path.join(work, "node-cache");
  const [a, b] = await Promise.all([openFolder(app.objects, ref, { cacheRoot }), openFolder(app.objects, ref, { cacheRoot })]);
  assert.equal(a.dir, b.dir);
  assert.equal(a.inPlace, false, "objects were forced");
  assert.equal(a.fetchedBytes + b.fetchedBytes, 370_001 + 19, "the bytes were fetched once for the node");
  for (const name of readdirSync(src)) assert.deepEqual(readFileSync(path.join(a.dir, name)), readFileSync(path.join(src, name)), `${name} is identical`);
  const again = await openFolder(app.objects, ref, { cacheRoot });
  assert.equal(again.fetchedBytes, 0, "a later opener reuses the node's copy");
  await dropFolder(app.objects, ref);
});

test("a folder visible on this host is read in place; shipped without objects it is a clear error where it is not visible", async () => {
  const plain = await shipFolder(app.objects, src, { objects: false });
  const opened = await openFolder(app.objects, plain);
  assert.deepEqual(opened, { dir: src, inPlace: true, fetchedBytes: 0 });
  const elsewhere = { ...plain, host: "another-host" };
  await assert.rejects(openFolder(app.objects, elsewhere), /is not readable from .* and was shipped without its files: ship it with objects/);
  await assert.rejects(shipFolder(app.objects, src, { objects: false, names: ["../etc"] }), /a file name, not a path, is expected/);
});
