/**
 * A real Slurm for tests: Debian's slurmctld and two slurmd ("n1", "n2") on
 * this machine, each node with fake GPUs (character devices), all state under
 * one throw-away folder, authentication off (test only) unless `munge`
 * (a munged of this cluster with its own key and socket). With `network`
 * (netns.ts) each slurmd runs inside its own network namespace at its own
 * address, so nodes, agents and the head talk over distinct addresses and a
 * node can be cut off; otherwise every node is 127.0.0.1. Installs the
 * packages when missing. `stop()` cancels every job, then stops the daemons by
 * pid, then any leftover slurmstepd of this cluster: nothing is left behind.
 * Facts this relies on: ../../../shared/notes/slurm.md.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import type { HostNetwork } from "./netns.js";

const run = promisify(execFile);
const PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"];

/** One fake node. */
export interface SlurmNodeSpec {
  name: string;
  cpus: number;
  /** MiB. */
  memMiB: number;
  gpus: number;
}

/** A running test cluster. */
export interface SlurmCluster {
  /** Path of slurm.conf; every Slurm command needs it in SLURM_CONF. */
  conf: string;
  dir: string;
  nodes: SlurmNodeSpec[];
  /** Environment for Slurm commands (process.env plus SLURM_CONF). */
  env: NodeJS.ProcessEnv;
  /** Runs a Slurm command and returns its stdout. */
  cmd(program: string, args: string[]): Promise<string>;
  /** Job ids Slurm knows about (pending or running) and their state. */
  jobs(): Promise<Array<{ id: string; state: string; name: string; nodes: string }>>;
  /** Kills one node's slurmd (SIGKILL). */
  killSlurmd(node: string): void;
  /** The namespaces the nodes run in, when started with `network`. */
  network?: HostNetwork;
  /** Stops everything; idempotent. */
  stop(): Promise<void>;
}

/** Installs the Slurm packages with apt-get when a program is missing. */
export function ensureSlurmInstalled(): void {
  if (["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch"].every((p) => existsSync(p))) return;
  execFileSync("apt-get", ["install", "-y", "-o", "DPkg::Lock::Timeout=600", ...PACKAGES], { stdio: "ignore", timeout: 900_000 });
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs: number, log: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`slurm harness: timed out waiting for ${what}\n${log()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Processes whose command line mentions `needle` (read from /proc; only this cluster's folder is ever passed). */
function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      const environ = readFileSync(`/proc/${entry}/environ`, "utf8");
      if (cmdline.includes(needle) || environ.includes(needle)) out.push(Number(entry));
    } catch {
      // Gone, or not readable.
    }
  }
  return out;
}

/** Starts slurmctld and one slurmd per node; resolves when every node is idle. */
export async function startSlurm(opts: { nodes?: SlurmNodeSpec[]; slurmdTimeoutS?: number; network?: HostNetwork; munge?: boolean } = {}): Promise<SlurmCluster> {
  ensureSlurmInstalled();
  const nodes = opts.nodes ?? [
    { name: "n1", cpus: 2, memMiB: 4000, gpus: 1 },
    { name: "n2", cpus: 2, memMiB: 4000, gpus: 1 },
  ];
  const network = opts.network;
  // Every node needs its namespace (throws naming the node otherwise).
  const nodeAddr = (n: SlurmNodeSpec): string => (network ? network.host(n.name).addr : "127.0.0.1");
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-slurm-"));
  for (const sub of ["state", "spool", "log", "dev", "out"]) mkdirSync(path.join(dir, sub));
  // munged wants its key's folder 0700 and its socket's folder 0755 (and reachable): two folders.
  const mungeSocket = path.join(dir, "munge-socket", "munge.socket");
  const mungeKey = path.join(dir, "munge-key", "munge.key");
  if (opts.munge) {
    chmodSync(dir, 0o755);
    mkdirSync(path.dirname(mungeKey), { mode: 0o700 });
    mkdirSync(path.dirname(mungeSocket), { mode: 0o755 });
    writeFileSync(mungeKey, randomBytes(1024), { mode: 0o600 });
  }
  const ctldPort = await freePort();
  const nodePorts = await Promise.all(nodes.map(() => freePort()));
  const gres: string[] = [];
  for (const n of nodes) {
    for (let g = 0; g < n.gpus; g++) {
      const dev = path.join(dir, "dev", `${n.name}-gpu${g}`);
      symlinkSync(g % 2 === 0 ? "/dev/null" : "/dev/zero", dev);
      gres.push(`NodeName=${n.name} Name=gpu File=${dev}`);
    }
  }
  const conf = path.join(dir, "slurm.conf");
  writeFileSync(path.join(dir, "gres.conf"), gres.join("\n") + "\n");
  writeFileSync(
    conf,
    [
      `ClusterName=hearth${path.basename(dir).slice(-6).toLowerCase().replace(/[^a-z0-9]/g, "x")}`,
      // slurmctld stays in this namespace; nodes in theirs reach it at the bridge's address.
      `SlurmctldHost=localhost(${network ? network.gateway : "127.0.0.1"})`,
      `SlurmctldPort=${ctldPort}`,
      "SlurmUser=root",
      "SlurmdUser=root",
      // Without munge, test only: a real cluster uses auth/munge. A path socket works across network namespaces.
      ...(opts.munge ? ["AuthType=auth/munge", "CredType=cred/munge", `AuthInfo=socket=${mungeSocket}`] : ["AuthType=auth/none", "CredType=cred/none"]),
      "MpiDefault=none",
      "ProctrackType=proctrack/linuxproc",
      "TaskPlugin=task/none",
      "SelectType=select/cons_tres",
      "SelectTypeParameters=CR_Core_Memory",
      "JobAcctGatherType=jobacct_gather/none",
      "AccountingStorageType=accounting_storage/none",
      "MailProg=/bin/true",
      "GresTypes=gpu",
      `StateSaveLocation=${dir}/state`,
      `SlurmdSpoolDir=${dir}/spool/%n`,
      `SlurmctldPidFile=${dir}/slurmctld.pid`,
      `SlurmdPidFile=${dir}/slurmd-%n.pid`,
      `SlurmctldLogFile=${dir}/log/slurmctld.log`,
      `SlurmdLogFile=${dir}/log/slurmd-%n.log`,
      // On loopback, keep slurmd off 0.0.0.0; in a namespace each slurmd owns its address space anyway.
      ...(network ? [] : ["CommunicationParameters=NoInAddrAny"]),
      "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1",
      `SlurmdTimeout=${opts.slurmdTimeoutS ?? 5}`,
      "SlurmdParameters=config_overrides",
      "ReturnToService=2",
      "KillWait=2",
      "EnforcePartLimits=ALL",
      ...nodes.map((n, i) => `NodeName=${n.name} NodeAddr=${nodeAddr(n)} Port=${nodePorts[i]} CPUs=${n.cpus} RealMemory=${n.memMiB}${n.gpus > 0 ? ` Gres=gpu:${n.gpus}` : ""}`),
      `PartitionName=debug Nodes=${nodes.map((n) => n.name).join(",")} Default=YES MaxTime=INFINITE State=UP`,
      "",
    ].join("\n"),
  );
  const env = { ...process.env, SLURM_CONF: conf };
  const daemons: ChildProcess[] = [];
  const daemonLog = (): string => {
    const logs = readdirSync(path.join(dir, "log")).map((f) => `--- ${f}\n${readFileSync(path.join(dir, "log", f), "utf8").split("\n").slice(-15).join("\n")}`);
    return logs.join("\n");
  };
  const launch = (program: string, args: string[]): ChildProcess => {
    const p = spawn(program, args, { env, stdio: ["ignore", "ignore", "ignore"] });
    p.on("error", () => undefined);
    daemons.push(p);
    return p;
  };
  const cmd = async (program: string, args: string[]): Promise<string> => (await run(program, args, { env, timeout: 20_000 })).stdout;
  const slurmd = new Map<string, ChildProcess>();
  let stopped = false;

  const cluster: SlurmCluster = {
    conf,
    dir,
    nodes,
    env,
    cmd,
    network,
    async jobs() {
      const out = await cmd("squeue", ["-h", "-o", "%i|%T|%j|%N"]);
      return out
        .split("\n")
        .filter((l) => l.trim() !== "")
        .map((l) => {
          const [id, state, name, nodeList] = l.split("|");
          return { id: id!, state: state!, name: name!, nodes: nodeList ?? "" };
        });
    },
    killSlurmd(node) {
      slurmd.get(node)?.kill("SIGKILL");
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      // 0. A node cut off by a test is reconnected, so that its jobs can be cancelled the ordinary way.
      for (const h of network?.hosts ?? []) {
        try {
          network!.restore(h.name);
        } catch {
          // Already gone.
        }
      }
      // 1. Cancel every job and wait for them to end (their processes survive daemon death otherwise).
      await cmd("scancel", ["--full", "-u", os.userInfo().username]).catch(() => undefined);
      await until("jobs to end", async () => ((await cluster.jobs()).length === 0 ? true : undefined), 15_000, () => "").catch(() => undefined);
      // 2. Daemons by pid; a slurmd that never registered may ignore SIGTERM.
      for (const p of daemons) p.kill("SIGTERM");
      const deadline = Date.now() + 5000;
      while (daemons.some((p) => p.exitCode === null && p.signalCode === null) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      for (const p of daemons) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
      // 3. Leftovers of this cluster: slurmstepd and job processes carry SLURM_CONF=<dir>/slurm.conf.
      for (let round = 0; round < 20; round++) {
        const left = pidsMentioning(conf).filter(alive);
        if (left.length === 0) break;
        for (const pid of left) {
          try {
            process.kill(pid, round < 5 ? "SIGTERM" : "SIGKILL");
          } catch {
            // Already gone.
          }
        }
        await new Promise((r) => setTimeout(r, 200));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };

  try {
    if (opts.munge) {
      launch("/usr/sbin/munged", ["-F", `--key-file=${mungeKey}`, `--socket=${mungeSocket}`, `--pid-file=${dir}/munged.pid`, `--seed-file=${dir}/munged.seed`, `--log-file=${dir}/log/munged.log`]);
      await until("munged", async () => (existsSync(mungeSocket) ? true : undefined), 10_000, daemonLog);
    }
    launch("/usr/sbin/slurmctld", ["-D", "-i", "-f", conf]);
    await until("slurmctld", async () => ((await cmd("scontrol", ["ping"])).includes("is UP") ? true : undefined), 30_000, daemonLog);
    for (const n of nodes) {
      // nsenter execs slurmd in place (no fork), so the pid is slurmd's own.
      const [program, ...prefix] = network ? [...network.exec(n.name), "/usr/sbin/slurmd"] : ["/usr/sbin/slurmd"];
      slurmd.set(n.name, launch(program!, [...prefix, "-D", "-N", n.name, "-f", conf]));
    }
    await until(
      "all nodes idle",
      async () => {
        const idle = (await cmd("sinfo", ["-h", "-N", "-t", "idle", "-o", "%N"])).split("\n").filter((l) => l.trim() !== "");
        return nodes.every((n) => idle.includes(n.name)) ? true : undefined;
      },
      30_000,
      daemonLog,
    );
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}
