#!/usr/bin/env node
/**
 * The `hearth` command line: processes (head, agent), the embedded local
 * cluster (up, down, status), the main job (demo) and model folders (model init).
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { HeadClient } from "../sdk/runtime/head-client.js";
import { parseMem } from "../sdk/runtime/resreq.js";
import { localAddressToward } from "../sdk/runtime/route.js";
import { ensureLocalCluster, findLocalCluster, hearthHome, stopLocalCluster } from "../sdk/engines/local.js";
import { findSlurmHead, listAppJobs } from "../sdk/engines/slurm/index.js";
import { HearthError } from "../sdk/errors/index.js";
import { parseDuration } from "../sdk/format.js";
import { CURVE_KEYS_ENV, ensureCurveKeys, loadCurveKeys } from "../sdk/wire/curve.js";
import { SECRET_FILE_ENV, appToken, ensureSecret, loadSecret, secretFile } from "../sdk/wire/auth.js";
import { Agent } from "./agent.js";
import { parseExecutorUids } from "./executor-users.js";
import { parseMedium } from "./storage-medium.js";
import { Head } from "./head/head.js";
import { parseGpuFlag } from "./resources.js";
import { formatStatus } from "./format-status.js";

/**
 * The help text. The commands' own modules (training, the notebook kernel,
 * the demo) are imported only when one of them runs or the help is asked
 * for: a head or an agent does not load them (the kernel's alone put ~21 MB
 * of source text and code in each one's heap, which every full garbage
 * collection of a busy agent walked).
 */
async function usage(): Promise<string> {
  const [{ TRAIN_USAGE }, { WARMSTART_USAGE }, { RUNS_USAGE }, { REPLAY_USAGE }, { MODEL_USAGE }] = await Promise.all([
    import("../sdk/rl/cli/train-cli.js"),
    import("../sdk/rl/cli/warmstart-cli.js"),
    import("../sdk/rl/cli/runs-cli.js"),
    import("../sdk/rl/cli/replay-cli.js"),
    import("./model-cli.js"),
  ]);
  return `usage: hearth <command> [options]

commands:
  head    [--bind tcp://127.0.0.1:0] [--keep-alive 30m] [--data-dir DIR] [--mem-limit 8g] [--endpoint-file F] [--agent-timeout 6s]
          [--curve-keys FILE]   accept only CURVE clients with the keys in FILE (created if missing)
          [--max-keep-alive 24h] [--max-apps 1000]   caps on what drivers may ask for
          [--max-peers 16384] [--max-drivers-per-app 64] [--max-agents 1024]   proven connections held at most
          [--max-unproven 1024] connections waiting to prove a credential at once (beyond it the oldest is dropped)
          [--max-connections-per-source 4096]   TCP connections one address may hold; beyond it new ones are refused
          [--max-unread 256m]   object data one connection may hold unread; past it its next data replies wait
          [--spool-medium auto|memory|disk]   without --data-dir, where large parts are spooled: /dev/shm (memory)
                                when --mem-limit fits in it and in a quarter of memory (auto), or the temp folder
          [--spool-dir DIR]     the spool's parent folder instead (a spool a killed head left there is removed)
          [--secret-file F]     the cluster secret peers prove (default HEARTH_SECRET_FILE, else HEARTH_HOME/secret; made if missing)
          run a head (scheduler, registry); prints its endpoint
  agent   --head ENDPOINT [--id ID] [--host ADDR|route] [--cpus N] [--mem 16g] [--gpus 4|0,1] [--work-dir DIR] [--label k=v ...]
          [--curve-keys FILE]   connect with CURVE (also HEARTH_CURVE_KEYS; executors get the client keys)
          [--executor-uids FIRST-LAST|none]   as root, each app's executors run as a uid of that app alone from
                                this range (default 2013265920-2080374783); none: as the agent's user (so any
                                service can read HEARTH_HOME and the cluster secret). Not root: always the agent's user
          [--executor-dir DIR]  root-owned parent of each app's executor files (default <tmpdir>/hearth-executors)
          [--cache-dir DIR]     the node cache's files, one copy per node (default <work-dir>/cache; a tmpfs such as
                                /dev/shm/hearth keeps them in memory): a folder hearth makes, or an empty one (it
                                marks it, empties it at start and removes only what it made); one holding other
                                files, a link, or one another user owns or can write is refused
          [--cache-medium auto|memory|disk]   without --cache-dir: /dev/shm/hearth-cache-<id>-<digest> (memory) when the
                                cache limit fits in it and in a quarter of memory (auto), else the folder above (disk)
          [--cache-limit 8g]    bytes of files the node cache keeps (default a quarter of this machine's memory)
          [--cache-max-connections-per-source 4096]   TCP connections one address may hold to the node cache
          [--exit-when-idle 5m] exit after hosting no executor for that long
          [--head-grace 60s]    exit (stopping executors) when the head is silent that long
          [--secret-file F]     the cluster secret (default HEARTH_SECRET_FILE, else HEARTH_HOME/secret)
          run an agent that starts executors on this node
  up      [--cpus N] [--mem SIZE] [--gpus N] [--executor-uids FIRST-LAST|none]
                                               start the local head and agent in the background; its executors run as
                                               your user (an app token then opens this cluster) unless given a uid range
                                               (as root; also HEARTH_EXECUTOR_UIDS): then each app's as a user of its own
  down    stop the local head and agent
  status  [--head ENDPOINT] [--slurm] [--json] show agents, apps, services and executors (admin: needs the cluster secret);
          with the Slurm head of HEARTH_HOME (--slurm, or when no local head runs) also every app's Slurm jobs:
          ids, states, nodes, how long each waited
  token   APP                                  print APP's token (HEARTH_APP_TOKEN): it opens that app only, not the cluster, where
                                               executors run as their app's own user (a \`hearth agent\` run as root, or \`hearth up --executor-uids\`);
                                               where they run as your user (the embedded default, an agent not run as root,
                                               Slurm) the app's code can read the cluster secret
  demo [--env calculator] [--agent F#E] [flags] the main job on the embedded default (Search-R1; --env calculator: the calculator; --agent: your agent on the calculator task)
  train   search-r1|calculator|agent-calculator|agent-chain [flags]  training of an environment (see below); --detach: the loop runs on the cluster
  train   agent --task calculator|chain --agent FILE#EXPORT [flags]  your agent, trained through the rollouts' OpenAI-compatible endpoint
  ${RUNS_USAGE}
  ${REPLAY_USAGE}
  warmstart [--env E] [--out DIR] [--steps N] (re)make an environment's shipped starting policy (see below)
  ${MODEL_USAGE}

${TRAIN_USAGE}

${WARMSTART_USAGE}
`;
}

/** Parses a positive whole-number flag. */
function positiveInt(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) throw new HearthError(`${flag} must be a positive whole number; got '${text}'`);
  return n;
}

/** Parses repeated `--label key=value` flags (agents started for a Slurm job carry hearth.job and hearth.service). */
function parseLabels(items: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const eq = item.indexOf("=");
    if (eq <= 0) throw new HearthError(`--label must be key=value; got '${item}'`);
    out[item.slice(0, eq)] = item.slice(eq + 1);
  }
  return out;
}

/** Host and port of a tcp:// endpoint. */
function headHostPort(endpoint: string): [string, number] {
  const m = /^tcp:\/\/\[?([^\]]+?)\]?:(\d+)$/.exec(endpoint);
  if (!m) throw new HearthError(`--host route needs a tcp://HOST:PORT head; got '${endpoint}'`);
  return [m[1]!, Number(m[2])];
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "head": {
      const { values } = parseArgs({
        args: rest,
        options: { bind: { type: "string" }, "keep-alive": { type: "string" }, "endpoint-file": { type: "string" }, "data-dir": { type: "string" }, "mem-limit": { type: "string" }, "agent-timeout": { type: "string" }, "curve-keys": { type: "string" }, "max-keep-alive": { type: "string" }, "max-apps": { type: "string" }, "secret-file": { type: "string" },
          "max-peers": { type: "string" }, "max-drivers-per-app": { type: "string" }, "max-agents": { type: "string" }, "max-unproven": { type: "string" }, "max-unread": { type: "string" }, "max-connections-per-source": { type: "string" }, "spool-dir": { type: "string" }, "spool-medium": { type: "string" } },
      });
      const head = await Head.start({
        bind: values.bind,
        keepAliveMs: values["keep-alive"] ? parseDuration(values["keep-alive"]) : undefined,
        dataDir: values["data-dir"],
        spoolDir: values["spool-dir"],
        spoolMedium: values["spool-medium"] ? parseMedium("--spool-medium", values["spool-medium"]) : undefined,
        memLimit: values["mem-limit"] ? parseMem(values["mem-limit"]) : undefined,
        agentTimeoutMs: values["agent-timeout"] ? parseDuration(values["agent-timeout"]) : undefined,
        curve: values["curve-keys"] ? ensureCurveKeys(values["curve-keys"]) : undefined,
        maxKeepAliveMs: values["max-keep-alive"] ? parseDuration(values["max-keep-alive"]) : undefined,
        maxApps: values["max-apps"] ? positiveInt("--max-apps", values["max-apps"]) : undefined,
        secret: ensureSecret(values["secret-file"] ?? secretFile()),
        peerLimits: {
          maxPeers: values["max-peers"] ? positiveInt("--max-peers", values["max-peers"]) : undefined,
          maxDriversPerApp: values["max-drivers-per-app"] ? positiveInt("--max-drivers-per-app", values["max-drivers-per-app"]) : undefined,
          maxAgents: values["max-agents"] ? positiveInt("--max-agents", values["max-agents"]) : undefined,
        },
        maxUnproven: values["max-unproven"] ? positiveInt("--max-unproven", values["max-unproven"]) : undefined,
        maxConnectionsPerSource: values["max-connections-per-source"] ? positiveInt("--max-connections-per-source", values["max-connections-per-source"]) : undefined,
        maxUnread: values["max-unread"] ? parseMem(values["max-unread"]) : undefined,
      });
      console.log(`hearth head listening on ${head.endpoint}`);
      if (values["endpoint-file"]) writeFileSync(values["endpoint-file"], head.endpoint, { mode: 0o600 });
      for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => void head.close());
      await head.waitForShutdown();
      return 0;
    }
    case "agent": {
      const { values } = parseArgs({
        args: rest,
        options: {
          head: { type: "string" },
          id: { type: "string" },
          host: { type: "string" },
          cpus: { type: "string" },
          mem: { type: "string" },
          gpus: { type: "string" },
          "work-dir": { type: "string" },
          label: { type: "string", multiple: true },
          "curve-keys": { type: "string" },
          "exit-when-idle": { type: "string" },
          "head-grace": { type: "string" },
          "secret-file": { type: "string" },
          "executor-uids": { type: "string" },
          "executor-dir": { type: "string" },
          "cache-dir": { type: "string" },
          "cache-medium": { type: "string" },
          "cache-limit": { type: "string" },
          "cache-max-connections-per-source": { type: "string" },
        },
      });
      // Read once here; the agent hands its executors their own credentials, never the secret.
      const secret = loadSecret(values["secret-file"] ?? secretFile());
      delete process.env[SECRET_FILE_ENV];
      if (values["curve-keys"]) process.env[CURVE_KEYS_ENV] = values["curve-keys"];
      const head = values.head ?? process.env.HEARTH_HEAD;
      if (!head) throw new HearthError("hearth agent needs --head tcp://HOST:PORT (or HEARTH_HEAD)");
      const cpus = values.cpus !== undefined ? Number(values.cpus) : undefined;
      if (cpus !== undefined && !(cpus > 0)) throw new HearthError(`--cpus must be a positive number; got '${values.cpus}'`);
      const agent = await Agent.start({
        head,
        id: values.id,
        // "route": the address this node uses to reach the head (Slurm jobs on nodes whose hostname resolves to loopback).
        host: values.host === "route" ? await localAddressToward(...headHostPort(head)) : values.host,
        workDir: values["work-dir"],
        labels: parseLabels(values.label ?? []),
        exitWhenIdleMs: values["exit-when-idle"] ? parseDuration(values["exit-when-idle"]) : undefined,
        headGraceMs: values["head-grace"] ? parseDuration(values["head-grace"]) : undefined,
        secret,
        executorUids: values["executor-uids"] !== undefined ? parseExecutorUids(values["executor-uids"]) : undefined,
        executorDir: values["executor-dir"],
        cacheDir: values["cache-dir"],
        cacheMedium: values["cache-medium"] ? parseMedium("--cache-medium", values["cache-medium"]) : undefined,
        cacheLimit: values["cache-limit"] !== undefined ? parseMem(values["cache-limit"]) : undefined,
        cacheMaxConnectionsPerSource: values["cache-max-connections-per-source"] !== undefined ? positiveInt("--cache-max-connections-per-source", values["cache-max-connections-per-source"]) : undefined,
        resources: {
          cpu: cpus,
          mem: values.mem !== undefined ? parseMem(values.mem) : undefined,
          gpus: values.gpus !== undefined ? parseGpuFlag(values.gpus) : undefined,
        },
      });
      console.log(`hearth agent ${agent.id} → ${head} (cpu ${agent.resources.cpu}, mem ${agent.resources.mem}, gpus [${agent.resources.gpus.join(",")}])`);
      for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => void agent.close());
      await agent.stopped;
      return 0;
    }
    case "up": {
      const { values } = parseArgs({ args: rest, options: { cpus: { type: "string" }, mem: { type: "string" }, gpus: { type: "string" }, "executor-uids": { type: "string" } } });
      const uids = values["executor-uids"];
      if (uids !== undefined) parseExecutorUids(uids); // a clear error before anything starts
      const before = findLocalCluster();
      const c = await ensureLocalCluster({ cpus: values.cpus !== undefined ? Number(values.cpus) : undefined, mem: values.mem, gpus: values.gpus, executorUids: uids });
      console.log(`${before ? "already running" : "started"}: head ${c.endpoint} (pid ${c.headPid}), agent pid ${c.agentPid}; state in ${c.home}`);
      return 0;
    }
    case "down": {
      const stopped = await stopLocalCluster();
      console.log(stopped ? "stopped the local head and agent" : "no local head is running");
      return 0;
    }
    case "status": {
      const { values } = parseArgs({ args: rest, options: { head: { type: "string" }, json: { type: "boolean" }, slurm: { type: "boolean" } } });
      // The Slurm head of HEARTH_HOME (started by a driver with --engine slurm), when asked for or when no local head runs.
      const slurmHead = findSlurmHead(hearthHome());
      const local = values.slurm ? undefined : findLocalCluster()?.endpoint;
      const endpoint = values.head ?? process.env.HEARTH_HEAD ?? local ?? slurmHead?.endpoint;
      if (!endpoint) {
        console.log(values.slurm ? `no Slurm head is recorded in ${hearthHome()} (a driver with --engine slurm starts one)` : "no local head is running (start one with `hearth up`), and no --head was given");
        return 1;
      }
      const onSlurm = slurmHead !== undefined && slurmHead.endpoint === endpoint;
      const curve = onSlurm && slurmHead.curveKeys ? loadCurveKeys(slurmHead.curveKeys) : undefined;
      const { client } = await HeadClient.open(endpoint, { app: "_hearth-status" }, { timeoutMs: 5000, admin: true, curve });
      try {
        const status = await client.control("status", { all: true });
        if (onSlurm) {
          // Slurm's own view of every app's jobs (squeue), whether or not a driver is attached.
          const jobs = [];
          for (const app of status.apps as Array<{ name: string; services: Array<{ id: string; name: string }> }>) {
            if (app.name.startsWith("_hearth-")) continue;
            for (const j of await listAppJobs(app.name, app.services)) jobs.push({ app: app.name, ...j });
          }
          status.slurm = { jobs, lastError: null };
        }
        console.log(values.json ? JSON.stringify(status, null, 2) : formatStatus(status));
        await client.control("close-app", {});
      } finally {
        client.close();
      }
      return 0;
    }
    case "token": {
      const app = rest[0];
      if (!app || !/^[A-Za-z0-9_.-]{1,128}$/.test(app)) throw new HearthError("usage: hearth token APP (an app name: 1-128 letters, digits, '_', '.', '-')");
      console.log(appToken(loadSecret(secretFile()), app));
      return 0;
    }
    case "demo":
      return (await import("./demo.js")).runDemo(rest);
    case "train":
      return (await import("../sdk/rl/cli/train-cli.js")).runTrainCommand(rest, (await import("../sdk/envs/registry.js")).WORKLOADS);
    case "runs":
    case "attach":
    case "pause":
    case "resume":
    case "stop":
    case "fetch":
      return (await import("../sdk/rl/cli/runs-cli.js")).runRunsCommand(command, rest);
    case "replay":
      return (await import("../sdk/rl/cli/replay-cli.js")).runReplayCommand(rest, (await import("../sdk/rl/cli/runs-cli.js")).headOf);
    case "warmstart":
      return (await import("../sdk/rl/cli/warmstart-cli.js")).runWarmstartCommand(rest, (await import("../sdk/envs/registry.js")).POLICIES, "search-r1");
    case "kernel": return (await import("../kernel/cli.js")).runKernelCommand(rest);
    case "model": return (await import("./model-cli.js")).runModelCommand(rest);
    case undefined:
    case "help":
    case "--help":
    case "-h":
      console.log(await usage());
      return command === undefined ? 1 : 0;
    default:
      console.error(`unknown command '${command}'\n\n${await usage()}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof HearthError || (err instanceof Error && err.name === "TypeError" && "code" in err) ? `hearth: ${err.message}` : err);
    process.exit(1);
  },
);
