/**
 * Asking for more than the cluster has is never silent, on a real head and
 * agent: with a 2-cpu agent full (a pool of two cpu=1 executors), a gang
 * and a pool that each want one more cpu are reported at once and again
 * while they wait (which service, placed of wanted, what the agent has free
 * and who holds it), and fail at their ready deadline naming the same; a
 * service that fits is never reported.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "../../sdk/connect.js";
import type { App } from "../../sdk/runtime/app.js";
import type { PendingReport } from "../../sdk/runtime/pending-watch.js";
import { FIXTURES, rejection, startCluster, type TestCluster } from "../helpers/cluster.js";

const ref = { module: FIXTURES, export: "Counter" };
let cluster: TestCluster;
let app: App;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "2g" }] });
  app = await connect({ name: "pending", head: cluster.endpoint });
});

after(async () => {
  await app?.close().catch(() => undefined);
  await cluster?.stop();
});

test("a service that fits is never reported pending", async () => {
  const reports: PendingReport[] = [];
  await app.service(ref, { name: "rollouts", resreq: "cpu=1,mem=256m", warmup: 2, max: 2, onPending: (p) => reports.push(p), pendingEveryMs: 200 });
  assert.deepEqual(reports, []);
  const s = (await app.status()).apps[0]!.services.find((x) => x.name === "rollouts")!;
  assert.equal(s.pending, null, "the status has no pending explanation for it");
});

for (const kind of ["gang", "pool"] as const) {
  test(`a ${kind} asking more cpu than any agent has free is reported at once, again while it waits, and fails at its deadline naming the same`, async () => {
    const reports: PendingReport[] = [];
    const name = `${kind}-trainer`;
    // Reported every 300 ms: a 2.5 s deadline leaves room for several reports however slow the machine is.
    const opts = { name, resreq: "cpu=1,mem=256m", warmup: 1, readyTimeoutMs: 2500, onPending: (p: PendingReport) => void reports.push(p), pendingEveryMs: 300 };
    const waiting: Promise<unknown> = kind === "gang" ? app.service(ref, { ...opts, autoscale: false }) : app.service(ref, opts);
    const { error } = await rejection(waiting);
    assert.ok(reports.length >= 2, `reported at once and repeated while it waited (got ${reports.length})`);
    const first = reports[0]!;
    assert.equal(first.service, name);
    assert.equal(first.kind, kind);
    assert.equal(first.placed, 0);
    assert.equal(first.wanted, 1);
    assert.deepEqual(first.agents.map((a) => ({ id: a.id, free: a.free.cpu, total: a.total.cpu })), [{ id: "n1", free: 0, total: 2 }]);
    assert.match(first.agents[0]!.holders, /'rollouts' ×2/, "it names what holds the agent's cpus");
    assert.match(first.text, new RegExp(`^service '${name}' \\(${kind}, cpu=1,mem=256m each\\) is pending: 0 of 1 executor\\(s\\) placed; .*agent n1 has cpu 0 of 2`));
    assert.ok(reports.every((r) => r.text === first.text), "every report says the same while nothing changes");
    assert.equal(error.name, "TimeoutError");
    assert.match(error.message, new RegExp(`service '${name}' was not ready within 2\\.5 s: .*`));
    assert.ok(error.message.includes(first.text), `the deadline's error names the same: ${error.message}`);
    await app.stopService(name);
  });
}

test("pendingEveryMs must be positive: refused before anything is declared", async () => {
  const { error } = await rejection(app.service(ref, { name: "bad", pendingEveryMs: 0 }));
  assert.match(error.message, /pendingEveryMs must be a positive number of milliseconds; got 0/);
  assert.equal((await app.status()).apps[0]!.services.some((s) => s.name === "bad"), false);
});
