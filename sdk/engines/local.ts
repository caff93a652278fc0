/**
 * The local engine (the embedded default): a head and one agent started as
 * background processes on this machine, found again by later drivers through
 * a state file under HEARTH_HOME (default ~/.hearth). They outlive the
 * notebook or CLI that started them; `hearth down` stops them. Every
 * process started is recorded in HEARTH_HOME/processes.json the moment it is
 * spawned, so `hearth down` can stop them even after the head crashed.
 */
import { spawn } from "node:child_process";
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ConnectError } from "../wire/errors.js";
import { HeadClient } from "../runtime/head-client.js";
import { nodeFlags, tunedEnv } from "../runtime/process-tuning.js";
import type { Provisioner } from "../runtime/provisioner.js";
import { ensureSecret, hearthHome as homeDir } from "../wire/auth.js";

/** Options of the embedded default. */
export interface LocalClusterOptions {
  /** State folder; default HEARTH_HOME or ~/.hearth. */
  home?: string;
  /** The local agent's resources (default: detected). */
  cpus?: number;
  mem?: string;
  gpus?: string;
  /** How long to wait for the head and agent to come up. Default 30 s. */
  timeoutMs?: number;
  /**
   * Who the local agent's executors run as (its `--executor-uids`; default
   * HEARTH_EXECUTOR_UIDS, else "none": the user's own). The embedded default
   * is one user's: its executors run as that user and read what it reads (the
   * hearth checkout, the user's service modules, even under a private /root),
   * so an app token opens this cluster. A range (`FIRST-LAST`, as root) runs
   * each app's executors as a user of its own instead (docs/architecture.md,
   * "Security model").
   */
  executorUids?: string;
}

/** What the state file records about a running local cluster. */
export interface LocalCluster {
  endpoint: string;
  headPid: number;
  agentPid: number;
  home: string;
  startedAt: number;
}

const CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../cluster-agent/cli.js");

/** The state folder. */
export function hearthHome(home?: string): string {
  return homeDir(home);
}

/** The cluster secret of the local cluster (made on first use, 0600 in a 0700 home). */
function secretPath(home: string): string {
  return path.join(home, "secret");
}

function stateFile(home: string): string {
  return path.join(home, "local.json");
}

function processesFile(home: string): string {
  return path.join(home, "processes.json");
}

/** A process `hearth up` started, as recorded in processes.json. */
interface StartedProcess {
  role: "head" | "agent";
  pid: number;
}

function readProcesses(home: string): StartedProcess[] {
  try {
    const list = JSON.parse(readFileSync(processesFile(home), "utf8")) as StartedProcess[];
    return Array.isArray(list) ? list.filter((p) => Number.isInteger(p?.pid) && p.pid > 0) : [];
  } catch {
    return [];
  }
}

function recordProcess(home: string, p: StartedProcess): void {
  writeFileSync(processesFile(home), JSON.stringify([...readProcesses(home), p]), { mode: 0o600 });
}

/**
 * True when `pid` is alive and still runs hearth's CLI: a recorded pid the
 * system reused for an unrelated process is never signalled.
 */
function isHearthProcess(pid: number): boolean {
  if (!alive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes(CLI);
  } catch {
    return process.platform !== "linux"; // no /proc: trust the record
  }
}

/** True while a process id exists and has not exited (a zombie not yet reaped, e.g. a killed head this driver spawned, is gone). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return process.platform !== "linux"; // no /proc: trust kill(0)
  }
}

/** Reads the state file; returns undefined when there is no live local head. */
export function findLocalCluster(home?: string): LocalCluster | undefined {
  const c = readClusterFile(hearthHome(home));
  return c && alive(c.headPid) ? c : undefined;
}

/** The state file's content, whether or not its processes still run. */
function readClusterFile(home: string): LocalCluster | undefined {
  try {
    const c = JSON.parse(readFileSync(stateFile(home), "utf8")) as LocalCluster;
    return typeof c?.endpoint === "string" && Number.isInteger(c.headPid) && Number.isInteger(c.agentPid) ? c : undefined;
  } catch {
    return undefined;
  }
}

/** Finds the local head and agent, or starts them in the background. */
export async function ensureLocalCluster(opts: LocalClusterOptions = {}): Promise<LocalCluster> {
  const home = hearthHome(opts.home);
  // Private to this user: it holds endpoints, pids, logs and (with CURVE) keys.
  mkdirSync(path.join(home, "logs"), { recursive: true, mode: 0o700 });
  chmodSync(home, 0o700);
  // The head's data dir and the agent's work dir hold objects, projects and executor logs: private too.
  for (const dir of ["logs", "data", "agent"]) {
    mkdirSync(path.join(home, dir), { recursive: true, mode: 0o700 });
    chmodSync(path.join(home, dir), 0o700);
  }
  ensureSecret(secretPath(home));
  const found = findLocalCluster(home);
  if (found) return found;
  const release = await lock(path.join(home, "local.lock"));
  try {
    const again = findLocalCluster(home);
    if (again) return again;
    return await startLocalCluster(home, opts);
  } finally {
    release();
  }
}

async function startLocalCluster(home: string, opts: LocalClusterOptions): Promise<LocalCluster> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const endpointFile = path.join(home, "head.endpoint");
  // A head that crashed leaves its agent and warm executors running (for the agent's --head-grace): the new
  // head binds the same endpoint with the same data dir (objects, apps, service specs) and adopts them.
  const survivor = readClusterFile(home);
  const reuse = survivor !== undefined && isHearthProcess(survivor.agentPid) ? survivor : undefined;
  let started = await startHead(home, endpointFile, timeoutMs, reuse?.endpoint);
  if (!started && reuse) {
    // The old endpoint could not be bound (taken meanwhile): start afresh; the old agent is stopped, its executors with it.
    process.kill(reuse.agentPid, "SIGTERM");
    started = await startHead(home, endpointFile, timeoutMs, undefined);
  }
  if (!started) throw new ConnectError(`the local head did not start within ${timeoutMs / 1000} s; see ${path.join(home, "logs", "head.log")}`);
  const { endpoint, head } = started;
  if (reuse && endpoint === reuse.endpoint) return await finishStart(home, endpoint, head, reuse.agentPid, timeoutMs);
  const agentArgs = ["agent", "--head", endpoint, "--id", "local", "--work-dir", path.join(home, "agent"), "--secret-file", secretPath(home)];
  if (opts.cpus !== undefined) agentArgs.push("--cpus", String(opts.cpus));
  if (opts.mem !== undefined) agentArgs.push("--mem", opts.mem);
  if (opts.gpus !== undefined) agentArgs.push("--gpus", opts.gpus);
  agentArgs.push("--executor-uids", opts.executorUids ?? process.env.HEARTH_EXECUTOR_UIDS ?? "none");
  const agent = spawnDetached(agentArgs, path.join(home, "logs", "agent.log"));
  recordProcess(home, { role: "agent", pid: agent });
  return await finishStart(home, endpoint, head, agent, timeoutMs);
}

/** Starts the local head (on `bind`, default a free port); undefined if it exits or stays silent. */
async function startHead(home: string, endpointFile: string, timeoutMs: number, bind: string | undefined): Promise<{ endpoint: string; head: number } | undefined> {
  rmSync(endpointFile, { force: true });
  const args = ["head", "--endpoint-file", endpointFile, "--data-dir", path.join(home, "data"), "--secret-file", secretPath(home), ...(bind ? ["--bind", bind] : [])];
  const head = spawnDetached(args, path.join(home, "logs", "head.log"));
  recordProcess(home, { role: "head", pid: head });
  const endpoint = await poll(timeoutMs, () => {
    if (existsSync(endpointFile)) return readFileSync(endpointFile, "utf8").trim() || undefined;
    return alive(head) ? undefined : "";
  });
  return endpoint ? { endpoint, head } : undefined;
}

/** Waits for the local agent to register, then writes the state file. */
async function finishStart(home: string, endpoint: string, head: number, agent: number, timeoutMs: number): Promise<LocalCluster> {
  const { client } = await HeadClient.open(endpoint, { app: "_hearth-local" }, { timeoutMs, home });
  try {
    const registered = await poll(timeoutMs, async () => {
      const s = await client.control("status", {});
      return (s.agents as unknown[]).length > 0 ? true : undefined;
    });
    if (!registered) throw new ConnectError(`the local agent did not register within ${timeoutMs / 1000} s; see ${path.join(home, "logs", "agent.log")}`);
    await client.control("close-app", {});
  } finally {
    client.close();
  }
  const cluster: LocalCluster = { endpoint, headPid: head, agentPid: agent, home, startedAt: Date.now() };
  writeFileSync(stateFile(home), JSON.stringify(cluster, null, 2), { mode: 0o600 });
  return cluster;
}

/**
 * Stops the local head and agent: asks a live head to shut down, then signals
 * every process `hearth up` recorded that still runs (SIGTERM: an agent stops
 * its executors; SIGKILL after `timeoutMs`). Works after a head crash too.
 * Returns false when nothing was running.
 */
export async function stopLocalCluster(home?: string, timeoutMs = 20_000): Promise<boolean> {
  const h = hearthHome(home);
  const c = findLocalCluster(h);
  rmSync(stateFile(h), { force: true });
  const recorded = readProcesses(h);
  const pids = [...new Set([...recorded.map((p) => p.pid), ...(c ? [c.headPid, c.agentPid] : [])])].filter(isHearthProcess);
  if (c) {
    try {
      const { client } = await HeadClient.open(c.endpoint, { app: "_hearth-local" }, { timeoutMs: 5000, home: h, admin: true });
      await client.control("shutdown", {}).catch(() => undefined);
      client.close();
    } catch {
      // Not answering: fall through to signals.
    }
  }
  if (!c && pids.length === 0) {
    rmSync(processesFile(h), { force: true });
    return false;
  }
  // A crashed head cannot say bye: the survivors get SIGTERM (the agent stops its executors and exits).
  const early = c ? await poll(Math.min(timeoutMs, 5000), () => (pids.every((pid) => !alive(pid)) ? true : undefined)) : undefined;
  if (!early) for (const pid of pids) if (isHearthProcess(pid)) process.kill(pid, "SIGTERM");
  const gone = early ?? (await poll(timeoutMs, () => (pids.every((pid) => !alive(pid)) ? true : undefined)));
  if (!gone) for (const pid of pids) if (isHearthProcess(pid)) process.kill(pid, "SIGKILL");
  rmSync(processesFile(h), { force: true });
  // What `down` stopped must not come back at the next `up` (the head would restore it from its data dir).
  rmSync(path.join(h, "data", "runtime"), { recursive: true, force: true });
  return true;
}

function spawnDetached(args: string[], logFile: string): number {
  const out = openSync(logFile, "a", 0o600);
  const child = spawn(process.execPath, [...nodeFlags(), CLI, ...args], { detached: true, stdio: ["ignore", out, out], env: { ...process.env, ...tunedEnv() } });
  closeSync(out);
  child.unref();
  return child.pid!;
}

async function poll<T>(timeoutMs: number, probe: () => T | undefined | Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await probe();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  return undefined;
}

/** A cross-process lock file; a lock older than 60 s is considered stale. */
export async function lock(file: string): Promise<() => void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      closeSync(openSync(file, "wx", 0o600));
      return () => rmSync(file, { force: true });
    } catch {
      try {
        if (Date.now() - statSync(file).mtimeMs > 60_000) rmSync(file, { force: true });
      } catch {
        // Gone meanwhile: retry.
      }
      if (Date.now() > deadline) throw new ConnectError(`could not take the lock ${file}; remove it if no hearth process is starting`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** The local engine's part of `connect()`'s options. */
export interface LocalEngineOptions {
  /** Embedded default only: where the local head keeps its state, and the local agent's resources. */
  local?: LocalClusterOptions;
}

/**
 * The local engine as a provisioner (`connect({ engine: "local" })`, the
 * default): the embedded head and agent of HEARTH_HOME, started on first
 * use; with a given endpoint, that head and whatever agents joined it. It
 * supplies no agents per service (no `attach`).
 */
export const localProvisioner: Provisioner<LocalEngineOptions> = {
  engine: "local",
  async head(opts, given) {
    return { endpoint: given ?? (await ensureLocalCluster(opts.local)).endpoint, curveKeys: null, home: hearthHome(opts.local?.home) };
  },
};
