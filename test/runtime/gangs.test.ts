/**
 * Gangs on real processes: all members granted together or none, even with
 * a competing gang; ranks by sorted executor id; GPUs pinned; a working
 * rendezvous; a lost member fails the gang with its rank.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import { GangFailedError } from "../../sdk/errors/index.js";
import { FIXTURES, executorsOf, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import type { GangMember } from "../fixtures/services.js";

let cluster: TestCluster;
let app: App;
const ref = { module: FIXTURES, export: "GangMember" };

before(async () => {
  // 3 GPU slots on a CPU machine: two gangs of 2 × gpu=1 cannot both run.
  cluster = await startCluster({ agents: [{ id: "gpu-node", cpus: 8, mem: "8g", gpus: 3 }] });
  app = await connect({ name: "gangs", head: cluster.endpoint });
});

after(async () => {
  await app?.close();
  await cluster?.stop();
});

test("a gang of 2 runs whole while a competing gang of 2 waits whole, then runs", async () => {
  const a = await app.service<GangMember>(ref, { name: "gang-a", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  assert.equal(a.kind, "gang");
  assert.equal(a.members.length, 2);
  const ids = a.members.map((m) => m.executorId);
  assert.deepEqual(ids, [...ids].sort(), "rank follows sorted executor id");

  const ctx = await a.broadcast("context", [[], []]);
  assert.deepEqual(ctx.map((c) => c.rank), [0, 1]);
  assert.deepEqual(ctx.map((c) => c.worldSize), [2, 2]);
  assert.equal(new Set(ctx.map((c) => c.cudaVisibleDevices)).size, 2, "each member has its own GPU");
  for (const c of ctx) {
    assert.match(c.cudaVisibleDevices ?? "", /^[0-2]$/);
    assert.deepEqual(c.rendezvous, ctx[0]!.rendezvous);
  }
  assert.deepEqual(await a.broadcast("sumAtRoot", [[10], [32]]), [42, 1], "members meet at the rendezvous");

  // The competitor asks for 2 more GPUs while only 1 is free: it must wait whole.
  const bPromise = app.service<GangMember>(ref, { name: "gang-b", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  let bDone = false;
  void bPromise.then(() => (bDone = true), () => (bDone = true));
  await waitFor("gang-b to be declared", async () => ((await app.status()).apps[0]!.services.some((s) => s.name === "gang-b") ? true : undefined));
  await new Promise((r) => setTimeout(r, 500));
  const waiting = (await app.status()).apps[0]!.services.find((s) => s.name === "gang-b")!;
  assert.equal(waiting.state, "pending");
  assert.equal(waiting.executors.length, 0, "no partial gang: not a single member started");
  assert.equal(bDone, false);
  const agent = (await app.status()).agents[0]!;
  assert.equal(agent.free.gpus.length, 1, "the free GPU stays free rather than going to half a gang");

  await a.stop();
  const b = await bPromise;
  assert.equal(b.members.length, 2);
  assert.deepEqual(await b.broadcast("sumAtRoot", [[1], [2]]), [3, 1]);
  // Every member of a gang holds the same rendezvous key, another gang another one, and no driver sees it.
  const bCtx = await b.broadcast("context", [[], []]);
  for (const c of [...ctx, ...bCtx]) assert.match(c.rendezvous?.key ?? "", /^[0-9a-f]{64}$/, "a 256-bit rendezvous key for every member");
  assert.equal(bCtx[1]!.rendezvous!.key, bCtx[0]!.rendezvous!.key);
  assert.notEqual(bCtx[0]!.rendezvous!.key, ctx[0]!.rendezvous!.key, "each gang start signs with its own key");
  assert.equal(JSON.stringify(b.info).includes(bCtx[0]!.rendezvous!.key), false, "the service info drivers get carries no key");
  await b.stop();
});

test("killing a gang member fails the gang with an error naming the rank; declaring it again restarts it", async () => {
  const g = await app.service<GangMember>(ref, { name: "gang-k", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  const ctx = await g.broadcast("context", [[], []]);
  const st = await cluster.status();
  const rank1 = executorsOf(st, "gangs", "gang-k").find((e: any) => e.rank === 1);
  const pending = g.broadcast("sleep", [[5000], [5000]]);
  await new Promise((r) => setTimeout(r, 200));
  process.kill(rank1.pid, "SIGKILL");
  await assert.rejects(pending, (e: unknown) => {
    assert.ok(e instanceof GangFailedError, String(e));
    assert.equal(e.rank, 1);
    assert.equal(e.service, "gang-k");
    assert.equal(e.executorId, rank1.id);
    assert.match(e.message, /gang 'gang-k' lost rank 1 \(executor x\d+ .*SIGKILL/);
    return true;
  });
  await assert.rejects(g.callRank(0, "sleep", 1), GangFailedError, "later calls fail fast with the same error");
  const again = await app.service<GangMember>(ref, { name: "gang-k", resreq: "cpu=1,gpu=1", warmup: 2, autoscale: false });
  assert.deepEqual(await again.broadcast("sumAtRoot", [[5], [6]]), [11, 1]);
  assert.notDeepEqual(again.members.map((m) => m.executorId), ctx.map((c) => c.executorId));
  await again.stop();
});
