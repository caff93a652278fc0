/**
 * The provisioner interface from outside: a third engine registered with
 * `registerProvisioner` (agents as local processes, one per service, the
 * way the Slurm engine starts one job per executor) is selected by
 * `connect({ engine })`, gets the app's head id, supplies the only agent an
 * elastic service runs on, adds its key to `app.status()` and releases its
 * agents on `close()`. Unknown or duplicate engine names are clear errors.
 */
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { after, before, test } from "node:test";
import { connect, registerProvisioner } from "../../sdk/connect.js";
import type { HeadClient } from "../../sdk/runtime/head-client.js";
import type { AppProvision, Provisioner, ProvisionTarget } from "../../sdk/runtime/provisioner.js";
import { hearthHome } from "../../sdk/wire/auth.js";
import { ServiceConfigError } from "../../sdk/errors/index.js";
import { FIXTURES, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";
import type { Counter } from "../fixtures/services.js";

declare module "../../sdk/runtime/provisioner.js" {
  interface ProvisionStatus {
    /** This test's engine: the agents it started, by service id. */
    spare?: { agents: Record<string, string> };
  }
}

let cluster: TestCluster;
const attached: ProvisionTarget[] = [];
const started = new Map<string, ChildProcess>();

/** Starts one agent per elastic service of the app, labelled so that only that service runs on it. */
function attachSpare(client: HeadClient, target: ProvisionTarget): AppProvision {
  attached.push(target);
  const agents: Record<string, string> = {};
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let pass: Promise<void> = Promise.resolve();
  const tick = async (): Promise<void> => {
    const st = await client.control("status", { app: target.app });
    for (const s of (st.apps?.[0]?.services ?? []) as Array<{ id: string; elastic?: boolean }>) {
      if (s.elastic !== true || agents[s.id] || stopped) continue;
      agents[s.id] = `spare-${s.id}`;
      started.set(s.id, await cluster.addAgent({ id: agents[s.id]!, cpus: 1, args: ["--label", `hearth.service=${s.id}`] }));
    }
  };
  const loop = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      pass = tick().catch(() => undefined).finally(loop);
    }, 100);
  };
  loop();
  const detach = async (): Promise<void> => {
    stopped = true;
    clearTimeout(timer);
    await pass;
  };
  return {
    describe: () => ({ spare: { agents: { ...agents } } }),
    detach,
    async close() {
      await detach();
      for (const p of started.values()) p.kill("SIGTERM");
    },
  };
}

const spare: Provisioner<{ spare?: { note?: string } }> = {
  engine: "spare-test",
  async head(_opts, given) {
    return { endpoint: given ?? cluster.endpoint, curveKeys: null, home: hearthHome() }; // the test head keeps its secret there
  },
  async attach(client, target) {
    return attachSpare(client, target);
  },
};

before(async () => {
  cluster = await startCluster({ agents: [] }); // a head with no agent: only the provisioner supplies them
  registerProvisioner(spare);
});

after(async () => {
  await cluster?.stop();
});

test("unknown and duplicate engine names are refused, naming the engines there are", async () => {
  await assert.rejects(connect({ name: "x", engine: "nope" }), (e: unknown) => {
    assert.ok(e instanceof ServiceConfigError);
    assert.match(e.message, /unknown engine 'nope': use one of "local", "slurm", "spare-test"/);
    return true;
  });
  assert.throws(() => registerProvisioner({ ...spare }), /an engine named 'spare-test' is already registered/);
  assert.throws(() => registerProvisioner({ engine: "" } as Provisioner), ServiceConfigError);
});

test("a registered provisioner is selected by engine, supplies the service's only agent, shows in status and releases it on close", async () => {
  const app = await connect({ name: "provisioned", engine: "spare-test" });
  assert.equal(app.endpoint, cluster.endpoint, "the provisioner's head");
  assert.equal(attached.length, 1);
  const st0 = await app.status();
  assert.equal(attached[0]!.app, "provisioned");
  assert.equal(attached[0]!.headId, st0.head.id, "attach gets the head's instance id");
  assert.equal(st0.agents.length, 0, "no agent before a service needs one");

  const counter = await app.service<Counter>({ module: FIXTURES, export: "Counter" }, { resreq: "cpu=1" });
  assert.equal(await counter.call("add", 3), 3);
  const st = await app.status();
  const svc = st.apps[0]!.services[0]!;
  assert.equal(svc.elastic, true, "services of an app whose provisioner attached are elastic");
  assert.deepEqual(st.spare, { agents: { [svc.id]: `spare-${svc.id}` } }, "the provisioner's status key");
  assert.deepEqual(svc.executors.map((e) => e.agent), [`spare-${svc.id}`], "the executor runs on the provisioner's agent");

  await app.close();
  const agent = started.get(svc.id)!;
  await waitFor("the provisioner's agent to exit", () => (agent.exitCode !== null || agent.signalCode !== null ? true : undefined));
  await waitFor("the head to forget it", async () => ((await cluster.status()).agents.length === 0 ? true : undefined));
});
