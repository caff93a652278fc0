/**
 * The head a Slurm-backed app talks to: a detached `hearth head` on the
 * driver's machine with no agent of its own (agents arrive as Slurm jobs),
 * found again by later drivers through `$HEARTH_HOME/slurm-head.json`.
 * It binds loopback unless told otherwise (`bind`): on a real cluster, bind
 * an address the compute nodes can reach.
 */
import { spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { HeadClient } from "../../runtime/head-client.js";
import { nodeFlags, tunedEnv } from "../../runtime/process-tuning.js";
import { ConnectError } from "../../wire/errors.js";
import { ensureCurveKeys, loadCurveKeys } from "../../wire/curve.js";
import { ensureSecret } from "../../wire/auth.js";
import { alive, lock } from "../local.js";

/** The hearth CLI (compiled), which every job runs as `node <CLI> agent ...`. */
export const HEARTH_CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../cluster-agent/cli.js");

/** Where and how the Slurm head runs. */
export interface SlurmHeadOptions {
  /** State folder (HEARTH_HOME, default ~/.hearth). */
  home: string;
  /** Endpoint to bind. Default tcp://127.0.0.1:0 (loopback: only for Slurm nodes on this machine). */
  bind?: string;
  /** An agent silent this long is lost and its calls retried. Default the head's (6 s). */
  agentTimeoutMs?: number;
  /** How long to wait for the head to start. Default 30 s. */
  timeoutMs?: number;
  /** CURVE key file (created on first use); null turns CURVE off. Default <home>/curve-keys.json. */
  curveKeys?: string | null;
}

/** A running Slurm head as recorded in its state file. */
export interface SlurmHead {
  endpoint: string;
  pid: number;
  home: string;
  /** The CURVE key file every client of this head needs, or null when the head runs without CURVE. */
  curveKeys: string | null;
}

/** Where a HEARTH_HOME keeps its head's CURVE keys. */
export function defaultCurveKeys(home: string): string {
  return path.join(home, "curve-keys.json");
}

function stateFile(home: string): string {
  return path.join(home, "slurm-head.json");
}


/** The recorded Slurm head, if its process is alive. */
export function findSlurmHead(home: string): SlurmHead | undefined {
  try {
    const h = JSON.parse(readFileSync(stateFile(home), "utf8")) as SlurmHead;
    return alive(h.pid) ? h : undefined;
  } catch {
    return undefined;
  }
}

/** Finds the Slurm head of this HEARTH_HOME or starts one in the background. */
export async function ensureSlurmHead(opts: SlurmHeadOptions): Promise<SlurmHead> {
  mkdirSync(path.join(opts.home, "logs"), { recursive: true, mode: 0o700 });
  // The cluster secret every agent job proves (it reaches them as HEARTH_SECRET_FILE, see engine.ts).
  ensureSecret(path.join(opts.home, "secret"));
  const found = findSlurmHead(opts.home);
  if (found) return found;
  const release = await lock(path.join(opts.home, "slurm-head.lock"));
  try {
    return findSlurmHead(opts.home) ?? (await startHead(opts));
  } finally {
    release();
  }
}

async function startHead(opts: SlurmHeadOptions): Promise<SlurmHead> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const endpointFile = path.join(opts.home, "slurm-head.endpoint");
  rmSync(endpointFile, { force: true });
  const args = [HEARTH_CLI, "head", "--bind", opts.bind ?? "tcp://127.0.0.1:0", "--endpoint-file", endpointFile, "--secret-file", path.join(opts.home, "secret")];
  const curveKeys = opts.curveKeys === null ? null : (opts.curveKeys ?? defaultCurveKeys(opts.home));
  if (curveKeys !== null) {
    ensureCurveKeys(curveKeys); // generated here on first use, so the head and every client share it
    args.push("--curve-keys", curveKeys);
  }
  if (opts.agentTimeoutMs !== undefined) args.push("--agent-timeout", `${opts.agentTimeoutMs}ms`);
  const logFile = path.join(opts.home, "logs", "slurm-head.log");
  const out = openSync(logFile, "a", 0o600);
  const child = spawn(process.execPath, [...nodeFlags(), ...args], { detached: true, stdio: ["ignore", out, out], env: { ...process.env, ...tunedEnv() } });
  closeSync(out);
  child.unref();
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(endpointFile) || readFileSync(endpointFile, "utf8").trim() === "") {
    if (Date.now() > deadline || !alive(child.pid!)) throw new ConnectError(`the Slurm head did not start within ${timeoutMs / 1000} s; see ${logFile}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const head: SlurmHead = { endpoint: readFileSync(endpointFile, "utf8").trim(), pid: child.pid!, home: opts.home, curveKeys };
  writeFileSync(stateFile(opts.home), JSON.stringify(head, null, 2), { mode: 0o600 });
  return head;
}

/** Shuts the Slurm head of this HEARTH_HOME down (its apps' executors stop). Returns false if none ran. */
export async function stopSlurmHead(home: string, timeoutMs = 15_000): Promise<boolean> {
  const h = findSlurmHead(home);
  rmSync(stateFile(home), { force: true });
  if (!h) return false;
  try {
    const curve = h.curveKeys ? loadCurveKeys(h.curveKeys) : undefined;
    const { client } = await HeadClient.open(h.endpoint, { app: "_hearth-slurm" }, { timeoutMs: 5000, curve, home, admin: true });
    await client.control("shutdown", {}).catch(() => undefined);
    client.close();
  } catch {
    // Not answering: signals below.
  }
  const deadline = Date.now() + timeoutMs;
  while (alive(h.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  if (alive(h.pid)) process.kill(h.pid, "SIGKILL");
  return true;
}

