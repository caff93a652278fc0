/**
 * The node cache keeps one copy of each large object as a file that the
 * executors of the object's app read in place. With executors running as
 * their apps' own users (an agent run as root, as in CI), an app's files are
 * readable by its executors and by no other app's: each executor here learns
 * where its node keeps its own app's object (and a folder made from it) and
 * tries to open the other app's; every such open is refused.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fromFile } from "../../sdk/cache/object-cache.js";
import { shipFolder } from "../../sdk/cache/folder.js";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import type { PoolHandle } from "../../sdk/runtime/handles.js";
import type { Streamer } from "../fixtures/stream-services.js";
import { DIST, startCluster, type TestCluster } from "../helpers/cluster.js";

const STREAMER = { module: path.join(DIST, "test/fixtures/stream-services.js"), export: "Streamer" };
const root = process.geteuid?.() === 0;
const skip = root ? false : "needs root: the agent starts each app's executors as that app's own user";
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-node-files-"));

let cluster: TestCluster;
const apps: App[] = [];
const pools: Array<PoolHandle<Streamer>> = [];

before(async () => {
  if (!root) return;
  cluster = await startCluster({ agents: [{ id: "nf", cpus: 4, mem: "2g" }] });
  for (const name of ["files-a", "files-b"]) {
    const app = await connect({ name, head: cluster.endpoint });
    apps.push(app);
    pools.push(await app.service<Streamer>(STREAMER, { name: "s", warmup: 1, resreq: "cpu=1" }));
  }
});

after(async () => {
  for (const a of apps) await a.close().catch(() => undefined);
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

test("two apps on one node cannot read each other's node-cache files, and each reads its own in place", { skip }, async () => {
  const own: string[][] = [];
  for (const [i, app] of apps.entries()) {
    const file = path.join(work, `obj-${i}.bin`);
    writeFileSync(file, Buffer.alloc(6 * 1024 * 1024, i + 1));
    await app.objects.put(fromFile(file), { key: "mine" });
    const r = await pools[i]!.call("parts", "mine");
    assert.ok(r.parts[0]?.file, `app ${i}'s large part is a file of its node`);
    own.push([r.parts[0]!.file!]);
  }
  const [a, b] = [pools[0]!, pools[1]!];
  const [whoA, whoB] = [await a.call("whoami"), await b.call("whoami")];
  assert.notEqual(whoA.uid, whoB.uid, "the two apps' executors run as different users");
  assert.deepEqual((await a.call("probe", own[0]!)).map((r) => r.outcome), ["read"], "app A reads its own copy in place");
  assert.deepEqual((await b.call("probe", own[1]!)).map((r) => r.outcome), ["read"], "app B reads its own copy in place");
  assert.deepEqual((await a.call("probe", own[1]!)).map((r) => r.outcome), ["EACCES"], "app A cannot open app B's copy");
  assert.deepEqual((await b.call("probe", own[0]!)).map((r) => r.outcome), ["EACCES"], "app B cannot open app A's copy");
  // The folder a node makes of an app's shipped files (links to the same copies) is that app's alone too.
  const src = mkdtempSync(path.join(work, "model-"));
  writeFileSync(path.join(src, "config.json"), '{"hidden_size": 8}');
  writeFileSync(path.join(src, "model.safetensors"), Buffer.alloc(3 * 1024 * 1024, 9));
  const ref = await shipFolder(apps[0]!.objects, src, { objects: true, forceObjects: true });
  const opened = await a.call("folder", ref);
  assert.equal(opened.inPlace, false);
  assert.deepEqual(opened.files.map((f) => f.name), ["config.json", "model.safetensors"]);
  const inFolder = opened.files.map((f) => path.join(opened.dir, f.name));
  assert.deepEqual((await a.call("probe", inFolder)).map((r) => r.outcome), ["read", "read"], "app A reads its folder in place");
  assert.deepEqual((await b.call("probe", inFolder)).map((r) => r.outcome), ["EACCES", "EACCES"], "app B cannot open app A's folder");
});

test("a publication its node kept from the publisher's files is the agent's file, read-only to the app and closed to other apps", { skip }, async () => {
  const [a, b] = [pools[0]!, pools[1]!];
  type Fetches = { fetches: { bytesFromHead: number; bytesFromPeers: number; kept: number } };
  const was = ((await a.call("nodeStat")) as unknown as Fetches).fetches;
  const pub = await a.call("publishShards", "kept-weights", [{ mib: 9, seed: 1 }, { mib: 3, seed: 2 }]);
  assert.equal(pub.bytesKeptByNode, 12 * 1024 * 1024, "the node kept both shards the publisher (running as app A's user) wrote");
  const r = await a.call("parts", "kept-weights");
  const files = r.parts.map((p) => p.file!);
  assert.equal(files.length, 2);
  for (const f of files) {
    const st = statSync(f);
    assert.deepEqual([st.uid, st.mode & 0o7777], [0, 0o640], `${f}: the agent's, group-readable only`);
  }
  assert.deepEqual((await a.call("probe", files)).map((p) => p.outcome), ["read", "read"], "app A reads the kept copy in place");
  assert.deepEqual((await b.call("probe", files)).map((p) => p.outcome), ["EACCES", "EACCES"], "app B cannot open it");
  const now = ((await a.call("nodeStat")) as unknown as Fetches).fetches;
  assert.deepEqual([now.bytesFromHead - was.bytesFromHead, now.bytesFromPeers - was.bytesFromPeers, now.kept - was.kept], [0, 0, 1], "nothing of it was fetched");
});
