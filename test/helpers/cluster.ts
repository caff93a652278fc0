/**
 * Starts real head and agent processes (ports bound to 0) for black-box tests
 * and stops them, leaving no process behind.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, copyFileSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { alive } from "../../sdk/engines/local.js";
import { nodeCacheName } from "../../cluster-agent/agent.js";
import { HeadClient } from "../../sdk/runtime/head-client.js";
import { SECRET_FILE_ENV, secretFile } from "../../sdk/wire/auth.js";
import { nodeFlags, tunedEnv } from "../../sdk/runtime/process-tuning.js";

/** The compiled tree (dist/). */
export const DIST = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
/** The compiled CLI. */
export const CLI = path.join(DIST, "cluster-agent/cli.js");
/** The compiled fixture services module. */
export const FIXTURES = path.join(DIST, "test/fixtures/services.js");
/** The compiled services of the deadline/liveness/orphan tests. */
export const LIVENESS = path.join(DIST, "test/helpers/liveness-services.js");

/** One agent to start. */
export interface AgentSpec {
  id: string;
  cpus?: number;
  mem?: string;
  gpus?: number;
  /** Run the agent as this user id (and group id), with its own world-writable work dir. */
  uid?: number;
  gid?: number;
  /** Where the agent dials the head (a relay in front of it); default the head's endpoint. */
  head?: string;
  /** More `hearth agent` flags, e.g. ["--head-grace", "1s"]. */
  args?: string[];
}

/** A running test cluster. */
export interface TestCluster {
  endpoint: string;
  head: ChildProcess;
  agents: Map<string, ChildProcess>;
  dir: string;
  /** Head's combined output so far. */
  headLog(): string;
  /** Starts one more agent. */
  addAgent(spec: AgentSpec): Promise<ChildProcess>;
  /** Head status (all apps); `fields` add to the request, e.g. `{ keys: 100 }` to list each app's object keys. */
  status(fields?: Record<string, unknown>): Promise<any>;
  stop(): Promise<void>;
}

/** Waits for `probe` to return a value other than undefined, polling every 50 ms. */
export async function waitFor<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function exited(p: ChildProcess): Promise<void> {
  return p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((r) => p.once("exit", () => r()));
}

/** Starts a head with `--keep-alive` and the given agents. */
export async function startCluster(opts: { agents: AgentSpec[]; keepAlive?: string; headArgs?: string[] }): Promise<TestCluster> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-test-"));
  const headArgs = [CLI, "head", "--bind", "tcp://127.0.0.1:0", ...(opts.headArgs ?? [])];
  if (opts.keepAlive) headArgs.push("--keep-alive", opts.keepAlive);
  // As the local and Slurm engines start them: hearth's V8 flags and process settings (process-tuning.ts) unless the test set its own.
  const head = spawn(process.execPath, [...nodeFlags(), ...headArgs], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...tunedEnv() } });
  let log = "";
  head.stdout!.on("data", (d: Buffer) => (log += d.toString()));
  head.stderr!.on("data", (d: Buffer) => (log += d.toString()));
  const endpoint = await waitFor("the head's endpoint", () => /listening on (tcp:\/\/\S+)/.exec(log)?.[1]);
  const agents = new Map<string, ChildProcess>();
  // Node cache folders the agents reported: one a killed agent left (on /dev/shm, outside the test's folder) is removed at stop.
  const cacheDirs = new Set<string>();
  // Folders this cluster made (its own, and each other-user agent's work folder): removed at stop unless HEARTH_TEST_KEEP=1 asks to read their logs.
  const madeDirs = [dir];
  // The observer reads every app's status and shuts the head down: the admin credential.
  const client = (await HeadClient.open(endpoint, { app: "_test-observer" }, { admin: true })).client;
  const status = (fields: Record<string, unknown> = {}): Promise<any> => client.control("status", { ...fields, all: true });

  const addAgent = async (spec: AgentSpec): Promise<ChildProcess> => {
    let workDir = path.join(dir, spec.id);
    if (spec.uid !== undefined) {
      workDir = mkdtempSync(path.join(os.tmpdir(), `hearth-agent-${spec.id}-`));
      madeDirs.push(workDir);
      // Writable by the agent's user, and sticky (as /tmp): nobody can swap the folders it makes there.
      chmodSync(workDir, 0o1777);
    }
    const args = [CLI, "agent", "--head", spec.head ?? endpoint, "--id", spec.id, "--work-dir", workDir];
    if (spec.cpus !== undefined) args.push("--cpus", String(spec.cpus));
    if (spec.mem !== undefined) args.push("--mem", spec.mem);
    args.push("--gpus", String(spec.gpus ?? 0), ...(spec.args ?? []));
    let env: NodeJS.ProcessEnv = { ...process.env, ...tunedEnv() };
    if (spec.uid !== undefined) {
      // Another user cannot read this HEARTH_HOME (0700): like an agent on another host, it gets
      // its own copy of the cluster secret, owned by it and private (HEARTH_SECRET_FILE).
      const secret = path.join(workDir, "secret");
      copyFileSync(secretFile(), secret);
      chownSync(secret, spec.uid, spec.gid ?? spec.uid);
      chmodSync(secret, 0o600);
      env = { ...env, [SECRET_FILE_ENV]: secret };
    }
    const p = spawn(process.execPath, [...nodeFlags(), ...args], { stdio: ["ignore", "ignore", "pipe"], uid: spec.uid, gid: spec.gid, env });
    p.stderr!.on("data", (d: Buffer) => (log += d.toString()));
    agents.set(spec.id, p);
    // This process, not an earlier agent of the same id the head still lists (killed, not yet timed out).
    await waitFor(`agent ${spec.id} (pid ${p.pid}) to register`, async () => ((await status()).agents.some((a: any) => a.id === spec.id && a.pid === p.pid) ? true : undefined));
    // Where its node cache lands on /dev/shm without --cache-dir (it reports it only after its first heartbeat).
    cacheDirs.add(path.join("/dev/shm", `hearth-cache-${nodeCacheName(spec.id, workDir)}`));
    return p;
  };
  for (const spec of opts.agents) await addAgent(spec);

  return {
    endpoint,
    head,
    agents,
    dir,
    headLog: () => log,
    addAgent,
    status,
    async stop() {
      const headDown = head.exitCode !== null || head.signalCode !== null;
      // Folders on /dev/shm the agents reported, removed below (a --cache-dir elsewhere, or the disk medium inside the test's folder, is not).
      if (!headDown) for (const a of (await status().catch(() => ({ agents: [] }))).agents ?? []) if (typeof a.cache?.dir === "string" && a.cache.dir.startsWith("/dev/shm/")) cacheDirs.add(a.cache.dir);
      if (!headDown) await client.control("shutdown", {}, 5000).catch(() => undefined);
      client.close();
      const all = [head, ...agents.values()];
      const timer = setTimeout(() => all.forEach((p) => p.kill("SIGKILL")), 15_000);
      await Promise.all(all.map(exited));
      clearTimeout(timer);
      for (const d of cacheDirs) rmSync(d, { recursive: true, force: true });
      if (process.env.HEARTH_TEST_KEEP !== "1") for (const d of madeDirs) rmSync(d, { recursive: true, force: true });
    },
  };
}

/** Executors of one service in a status document. */
export function executorsOf(status: any, app: string, service: string): any[] {
  const a = status.apps.find((x: any) => x.name === app);
  return a?.services.find((s: any) => s.name === service)?.executors ?? [];
}

/** True while a process id exists (a zombie, exited but not yet reaped, counts as gone): the local engine's check. */
export const pidAlive = alive;

/** Polls until process `pid` is gone; fails naming `what` after `timeoutMs`. Returns how long it took. */
export async function waitForExit(what: string, pid: number, timeoutMs = 10_000): Promise<number> {
  const t0 = Date.now();
  await waitFor(`${what} (pid ${pid}) to exit`, () => (pidAlive(pid) ? undefined : true), timeoutMs);
  return Date.now() - t0;
}

/** Settles `p` and returns its rejection (fails if it resolves), with how long it took from `t0`. */
export async function rejection(p: Promise<unknown>, t0 = Date.now()): Promise<{ error: Error; ms: number }> {
  const outcome = await p.then(
    (v) => ({ ok: true as const, v }),
    (e: unknown) => ({ ok: false as const, e }),
  );
  if (outcome.ok) throw new Error(`expected a rejection, got ${JSON.stringify(outcome.v)}`);
  return { error: outcome.e as Error, ms: Date.now() - t0 };
}

/** A head with a data dir, so that it can be killed and restarted on the same endpoint and find its objects; resolves with its endpoint. */
export function startHeadWithData(bind: string, dataDir: string): { proc: ChildProcess; endpoint: Promise<string> } {
  const proc = spawn(process.execPath, [CLI, "head", "--bind", bind, "--data-dir", dataDir, "--agent-timeout", "2s"], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  return { proc, endpoint: waitFor("the head's endpoint", () => /listening on (tcp:\/\/\S+)/.exec(out)?.[1], 20_000) };
}
