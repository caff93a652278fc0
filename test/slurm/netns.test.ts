/**
 * The Slurm engine across two hosts with their own addresses: nodes n1 and
 * n2 each run in a network namespace of their own (netns.ts: `ip netns`, a
 * veth pair each, one bridge), the head and slurmctld in the test's, bound on
 * the bridge address, with CURVE on (and Slurm's munge auth). Cutting n2's link (its veth down: no
 * reset, packets just vanish) shows its agent declared lost by heartbeat, the
 * pool call it was running retried on n1, and the gang spanning both hosts
 * failing with GangFailedError naming n2's rank and agent.
 *
 * Skips, saying why, only where namespaces cannot be made (not root, or a
 * container that refuses `ip netns add`).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import type { App } from "../../sdk/runtime/app.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { GangFailedError } from "../../sdk/errors/index.js";
import { ConnectError } from "../../sdk/wire/errors.js";
import { netnsSupport } from "./netns.js";
import type { Where } from "./services.js";
import { SERVICES, agentNodes, eventually, retriedCalls, startWorld, type SlurmWorld } from "./setup.js";

const support = netnsSupport();
const skip = support.ok ? false : `network namespaces unavailable: ${support.reason}`;

// 4 CPUs per node: a pool executor of cpu=3 fits once per node (so a pool of 2 spans both hosts),
// next to one gang member of cpu=1,gpu=1 (one fake GPU per node, so a gang of 2 spans both too).
const NODES = [
  { name: "n1", cpus: 4, memMiB: 4000, gpus: 1 },
  { name: "n2", cpus: 4, memMiB: 4000, gpus: 1 },
];
const POOL = { resreq: "cpu=3,mem=256m", warmup: 2, max: 2 };
const GANG = { resreq: "cpu=1,mem=256m,gpu=1", warmup: 2, autoscale: false as const };
const REF = { module: SERVICES, export: "Where" };

let world: SlurmWorld;
let app: App;

before(async () => {
  if (skip) return;
  world = await startWorld({ netns: true, nodes: NODES, munge: true });
  app = await world.connect("slurm-netns");
});

after(async () => {
  await world?.stop();
});



test("n1 and n2 are two hosts at their own addresses; their executors reach the head on the bridge, and only CURVE clients get in", { skip }, async () => {
  const net = world.net!;
  assert.match(app.endpoint, new RegExp(`^tcp://${net.gateway.replace(/\./g, "\\.")}:\\d+$`), "the head listens on the bridge address, not loopback");
  const pool = await app.service<Where>(REF, { name: "hosts", ...POOL });
  // Both members taking calls first (the second host's may still be starting): else both calls queue on one.
  const members = await eventually("both pool members taking calls", async () => {
    const m = await pool.members();
    return m.length === 2 ? m : undefined;
  }, 60_000);
  assert.equal(new Set(members.map((m) => m.agentId)).size, 2, "the pool's two members are on two agents");
  // Two calls at once on a pool of two concurrency-1 executors: one runs on each.
  const [a, b] = await Promise.all([pool.call("sleep", 300), pool.call("sleep", 300)]);
  const byNode = new Map([a!, b!].map((p) => [p.node, p]));
  assert.deepEqual(new Set(byNode.keys()), new Set(["n1", "n2"]), "one executor per host");
  for (const h of net.hosts) {
    assert.deepEqual(byNode.get(h.name)!.addrs, [h.addr], `the executor on ${h.name} sees only its host's address`);
    // The job's agent got the cluster's HEARTH_HOME; run as root (as here in CI) it starts executors as their app's own user, without it.
    assert.equal(byNode.get(h.name)!.hearthHome, process.geteuid?.() === 0 ? null : world.home, `the executor on ${h.name} sees HEARTH_HOME only where it shares the agent's user`);
  }
  assert.notEqual(byNode.get("n1")!.agentId, byNode.get("n2")!.agentId);
  // Authentication is on: Slurm's (munge, across the namespaces) and hearth's over the address the hosts use.
  assert.match(await world.slurm.cmd("scontrol", ["show", "config"]), /^AuthType\s*=\s*auth\/munge$/m);
  await assert.rejects(HeadClient.open(app.endpoint, { app: "intruder" }, { timeoutMs: 1500 }), ConnectError);
  await app.stopService("hosts");
});

test("cutting n2's link: its agent is lost, its pool call is retried on n1, the gang spanning n1 and n2 fails naming n2's rank", { skip }, async () => {
  const net = world.net!;
  const pool = await app.service<Where>(REF, { name: "retry", ...POOL });
  const gang = await app.service<Where>(REF, { name: "span", ...GANG });
  const where = await gang.broadcast("placement", [[], []]);
  assert.deepEqual(new Set(where.map((w) => w.node)), new Set(["n1", "n2"]), "the gang spans both hosts");
  const cutRank = where.find((w) => w.node === "n2")!.rank!;
  const cutGangAgent = where.find((w) => w.node === "n2")!.agentId;

  const calls = [pool.call("sleep", 3000), pool.call("sleep", 3000)];
  // Marked handled so that a failed assertion below does not also surface as an unhandled rejection.
  for (const c of calls) c.catch(() => undefined);
  const busy = await eventually("both pool executors to be busy", async () => {
    const s = await app.status();
    const ex = s.apps[0]!.services.find((x) => x.name === "retry")!.executors;
    return ex.length === 2 && ex.every((e) => e.inflight === 1) ? ex : undefined;
  });
  const broadcast = gang.broadcast("sleep", [[20_000], [20_000]]);
  broadcast.catch(() => undefined);
  const st = await app.status();
  const nodes = await agentNodes(world, st);
  const onN2 = busy.filter((e) => nodes.get(e.agent) === "n2");
  assert.equal(onN2.length, 1, "one pool executor runs on n2");
  const cutPoolAgent = onN2[0]!.agent;
  const retriedBefore = retriedCalls(st);

  const t0 = Date.now();
  net.cut("n2");
  try {
    await assert.rejects(broadcast, (e: unknown) => {
      assert.ok(e instanceof GangFailedError, String(e));
      assert.equal(e.rank, cutRank);
      assert.match(e.message, new RegExp(`gang 'span' lost rank ${cutRank} \\(executor \\S+ on agent ${cutGangAgent}, agent ${cutGangAgent} was lost\\)`));
      return true;
    });
    const gangFailedMs = Date.now() - t0;
    // The cause is recorded with the dead member: its agent was lost (not a crash of the executor).
    const span = (await app.status()).apps[0]!.services.find((x) => x.name === "span")!;
    assert.equal(span.state, "failed");
    const dead = span.dead.find((d) => d.rank === cutRank);
    assert.equal(dead?.detail, `agent ${cutGangAgent} was lost`);
    await eventually("n2's agents to be declared lost", async () => {
      const agents = (await app.status()).agents.map((x) => x.id);
      return agents.includes(cutPoolAgent) || agents.includes(cutGangAgent) ? undefined : true;
    });
    const lostMs = Date.now() - t0;
    const headLog = readFileSync(path.join(world.home, "logs", "slurm-head.log"), "utf8");
    for (const id of [cutPoolAgent, cutGangAgent]) assert.match(headLog, new RegExp(`agent ${id} lost: no heartbeat`), `the head logs ${id} as lost by heartbeat`);

    const results = await Promise.all(calls);
    assert.deepEqual(results.map((r) => r.node), ["n1", "n1"], "both pool calls were answered on n1");
    assert.ok(results.every((r) => r.executorId !== onN2[0]!.id));
    const after = await app.status();
    assert.equal(retriedCalls(after) - retriedBefore, 1, "exactly the call that was on n2 was retried");
    assert.equal(app.duplicateReplies, 0);
    console.log(`# slurm netns: n2 cut; gang failed after ${gangFailedMs} ms, n2's agents gone from status after ${lostMs} ms, pool calls done after ${Date.now() - t0} ms (agent timeout 2 s)`);
  } finally {
    net.restore("n2");
  }
  await app.stopService("span");
  await app.stopService("retry");
});
