/**
 * `npm run bench -- weights [--shape tiny|0.5b|1.5b | --bytes 6.2g] [--rollouts N] [--threads N] [--publisher-threads N]`:
 * weight sync at a real model's scale. A bf16 model in a tensor engine (a
 * Qwen2.5 shape, or with `--bytes` synthetic tensors of that size and no
 * model) publishes through the real publisher (`WeightPublisher`: the engine
 * writes each shard to a file, the publisher streams it to a real head while
 * the next is written, the write commits when the last is in); rollout
 * executors on two agents, each with a real engine, bring themselves up to
 * date through their node caches (one copy per node, passed from node to node
 * so the head sends a base once) and apply from the node's files in place.
 * A simulated optimizer step moves a share of the bf16 values by one ulp
 * (2.7 %, 0.5 %, 10 %, and one step where a tensor moves past a third).
 * Every step ends with the digests of every executor's weights checked
 * against the publisher's; a late joiner on a warm node catches up from the
 * node's copy. In the same run: a raw ZeroMQ stream of the same bytes with
 * the same chunking, for the ratios.
 */
import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseByteSize } from "../sdk/cache/buffers.js";
import { connect } from "../sdk/connect.js";
import type { PoolHandle } from "../sdk/runtime/handles.js";
import { DEFAULT_REBASE, WeightPublisher } from "../sdk/rl/services/weights.js";
import { TensorEngine } from "../sdk/tensor/index.js";
import { startCluster, type TestCluster } from "../test/helpers/cluster.js";
import { rawStream } from "./raw-stream.js";
import { DISTRIBUTION_DEFAULTS, runDistributionBench, type DistributionResult } from "./distribution.js";
import { printWeightsBench } from "./weights-report.js";
import { HANG_TIMEOUT_MS, type WeightsRollout, type WeightsSync } from "./weights-service.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MiB = 1024 * 1024;
/** The reference's sparse encoding: an int32 index and a bf16 value per changed value. */
export const REFERENCE_BYTES_PER_CHANGE = 6;

/** `--shape` names and the `hearth model init` presets they stand for. */
export const WEIGHT_SHAPES: Record<string, string> = { tiny: "qwen2-tiny", "0.5b": "qwen2.5-0.5b", "1.5b": "qwen2.5-1.5b", "3b": "qwen2.5-3b" };

/** One step of the bench: what the simulated optimizer changes, and how it is published. */
export interface WeightsStepSpec {
  name: string;
  /** Share of every tensor's values moved (0: none, the first publication). */
  share: number;
  /** A tensor moved by 40 % (dense) on top of `share`. */
  dense?: string;
  /** Publish as a fresh base: every executor fetches the whole model. */
  full?: boolean;
}

/** When one node's copy of a step's publication was complete, and where it came from. */
export interface NodeCopy {
  agentId: string;
  /** From the publication's commit to the node's copy installed. */
  commitToCopyMs: number;
  /** Where the copy came from: "head", "peer" (another node), "peer+head", "inline", "kept" (the publisher's files), "precopy" (copied while it uploaded). */
  source: string;
  bytes: number;
}

/** What one step published and what it cost on every executor. */
export interface WeightsStepResult extends WeightsStepSpec {
  kind: string;
  version: number;
  bytes: number;
  changed: number;
  elements: number;
  denseTensors: number;
  sparseTensors: number;
  bytesPerChanged: number;
  /** The engine's publish as the driver saw it (diff or export, and the files written). */
  exportMs: number;
  /** The engine's own split of it (seconds → ms). */
  engineMs: Record<string, number>;
  /** From the start of the publication to its commit at the head (export and upload overlap). */
  publishMs: number;
  executors: WeightsSync[];
  /** Per node: commit → its copy complete. */
  nodes: NodeCopy[];
  /** Commit → the first shard applied on the first executor to apply one, and on the last. */
  commitToFirstAppliedMs: { first: number; last: number } | null;
  /** Commit → the last executor exact. */
  commitToLastExactMs: number;
  /** From the start of the publication to the last executor's apply returning (exact). */
  slowestMs: number;
  /** Bytes that crossed a socket to executors (their node's files are read in place). */
  executorTcpBytes: number;
  /** Object bytes the head sent in this step, and to whom. */
  headBytesOut: number;
  headBytesOutTo: Record<string, number>;
  /** Every executor's digest equals the publisher's. */
  identical: boolean;
  /** Peak RSS (MiB) during this step, per process role. */
  peakRssMiB: Record<string, number>;
  /** CPU seconds each role's processes used from the publication's start to the last executor exact (2 cores: 2 s of CPU a second at most). */
  cpuS: Record<string, number>;
  /** The head's object bytes after the step (one base plus the patch history). */
  headObjectBytes: number;
  /** 1-minute load average before and after the step. */
  load: [number, number];
}

/** The whole run. */
export interface WeightsBenchResult {
  shape: string;
  preset: string;
  params: number;
  /** bf16 bytes of the weights (what a full publication moves, plus headers). */
  weightBytes: number;
  steps: WeightsStepResult[];
  /** A new executor on a warm node (null with synthetic weights). */
  lateJoiner: (WeightsSync & { identical: boolean }) | null;
  /** A new node after the patches (null with synthetic weights): its base from a peer, what the head sent it. */
  newNode: NewNodeJoin | null;
  /** Fresh bytes each process writes for a full publication, the raw rate of a new file on its medium, and the bound they make. */
  freshPages: FreshPages;
  /** A simulated distribution to 100 nodes (small object, loopback): the tree against a chain. */
  distribution: DistributionResult[];
  /** A raw ZeroMQ stream of the weights' bytes with the cache's chunking, into memory and into a file. */
  rawZmqMiBps: number;
  rawZmqToFileMiBps: number;
  placement: Record<string, string>;
  /** CPUs this machine gives the bench's processes (all of them share these). */
  cores: number;
}

/** A late joiner on a node that joins after the patches: its node copies the base from a peer. */
export interface NewNodeJoin extends WeightsSync {
  identical: boolean;
  /** What the head sent that node during its sync (patches only when a peer holds the base). */
  headBytes: number;
  /** Of its copy: bytes from other nodes, and from the head. */
  fromPeers: number;
  fromHead: number;
  /** Its base's bytes that came from the head (0: from a peer). */
  baseFromHead: number;
  source: string;
}

/** One process's fresh writes for a full publication on its medium. */
export interface FreshWrite {
  process: string;
  medium: string;
  dir: string;
  bytes: number;
  /** A raw stream into a new file there, measured in this run. */
  rawMiBps: number;
  /** bytes ÷ that rate. */
  ms: number;
}

/** The fresh-page bound: no process can write its fresh pages faster than a raw stream on its medium. */
export interface FreshPages {
  writes: FreshWrite[];
  /** The slowest process's writes (they overlap at best). */
  boundMs: number;
}

/** Options of runWeightsBench. */
export interface WeightsBenchOptions {
  /** A preset (`--shape`), or "synthetic" with `bytes`. */
  shape: string;
  /** With shape "synthetic": the publication's size in bytes. */
  bytes?: number;
  /** Rollout executors (default 3: two on one agent, one on the other; 2: one on each). */
  rollouts?: number;
  /** Torch threads per rollout engine (1: three of them share 2 cores). */
  threads: number;
  /** Torch threads of the publisher's engine, which works alone while it diffs and encodes. Default 2. */
  publisherThreads?: number;
  /** Progress lines. */
  log?: (line: string) => void;
  /** Steps to run; default defaultSteps(dense tensor), or one full publication for synthetic weights. */
  steps?: WeightsStepSpec[];
}

/**
 * The issue's steps. The full-weights peer is the first publication: every
 * executor (holding other random weights) fetches and applies the whole
 * model, as a full re-publication would make it, without the old base
 * beside the new one in the head and node caches (the re-base path is
 * tested at the tiny shape).
 */
export function defaultSteps(denseTensor: string): WeightsStepSpec[] {
  return [
    { name: "full-weights path (first publication)", share: 0, full: true },
    { name: "patch 2.7 %", share: 0.027 },
    { name: "patch 0.5 %", share: 0.005 },
    { name: "patch 10 %", share: 0.1 },
    { name: "patch 2.7 % + one tensor 40 % (dense)", share: 0.027, dense: denseTensor },
  ];
}

/**
 * The step after the late joiner and the new node: a trainer's update
 * published as a fresh base (a re-base) on a key every node holds, so the
 * nodes copy it ahead of its commit.
 */
export const REPUBLICATION: WeightsStepSpec = { name: "full re-publication (re-base, copied ahead)", share: 0.027, full: true };

/** The tensor the dense step moves past a third. */
export const DENSE_TENSOR = "model.layers.0.mlp.gate_proj.weight";

function readKiB(pid: number, field: string): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0; // gone
  }
}

/** CPU seconds (user + system) process `pid` has used so far; 0 once it is gone. */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // Fields 14 and 15 of stat (utime, stime), in clock ticks (100 a second on Linux).
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

/** Resets a process's peak RSS (Linux: clear_refs 5) so the next read is this phase's peak. */
function resetPeak(pid: number): void {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, "5");
  } catch {
    // Not ours or not Linux: the peak then covers the process's life.
  }
}

interface NodeStat {
  recent: Array<{ key: string; version: number; bytes: number; source: string; doneAt: number }>;
  fetches: { bytesFromHead: number; bytesFromPeers: number };
}

/** Runs the bench; throws if any executor ends a step not bit-identical to the publisher. */
export async function runWeightsBench(opts: WeightsBenchOptions): Promise<WeightsBenchResult> {
  const log = opts.log ?? (() => undefined);
  const synthetic = opts.shape === "synthetic";
  const preset = synthetic ? `synthetic ${((opts.bytes ?? 0) / 2 ** 30).toFixed(2)} GiB` : (WEIGHT_SHAPES[opts.shape] ?? opts.shape);
  const rollouts = opts.rollouts ?? 3;
  let cluster: TestCluster | undefined;
  let publisherEngine: TensorEngine | undefined;
  let app: Awaited<ReturnType<typeof connect>> | undefined;
  try {
    const publisherThreads = opts.publisherThreads ?? 2;
    publisherEngine = await TensorEngine.start({ env: { HEARTH_THREADS: String(publisherThreads) }, hangTimeoutMs: HANG_TIMEOUT_MS, requestTimeoutMs: 3_600_000 });
    const config = synthetic ? { synthetic_bytes: opts.bytes } : preset;
    const init = await publisherEngine.initModel({ config, seed: 0, dtype: "bfloat16", device: "cpu", threads: publisherThreads }, { timeoutMs: 1_800_000 });
    const weightBytes = init.params * 2;
    log(`publisher: ${preset}, ${(init.params / 1e6).toFixed(1)} M params, bf16 ${(weightBytes / MiB).toFixed(0)} MiB (${init.seconds.toFixed(1)} s to build)`);

    // The peer, measured before the cluster starts (the machine otherwise quiet): the same bytes, the same chunks.
    const rawZmqMiBps = await rawStream(weightBytes, false);
    const rawZmqToFileMiBps = await rawStream(weightBytes, true);
    log(`raw ZeroMQ stream of ${(weightBytes / MiB).toFixed(0)} MiB in 8 MiB chunks, 4 in flight: ${rawZmqMiBps.toFixed(0)} MiB/s into memory, ${rawZmqToFileMiBps.toFixed(0)} MiB/s into a file`);

    // Node caches big enough for one copy of the weights plus what a step adds.
    // (A quarter of memory rounded down: a limit past it puts the caches on disk, pickMedium.)
    const cacheLimit = `${Math.max(Math.floor(os.totalmem() / 4 / MiB), Math.ceil((weightBytes * 1.6) / MiB))}m`;
    const agentArgs = ["--cache-limit", cacheLimit];
    // One rollout per node (a, b, c…): each node copies the base once, the head sends it once, the nodes pass it on.
    const agentIds = Array.from({ length: rollouts }, (_, i) => String.fromCharCode(97 + i));
    cluster = await startCluster({ agents: agentIds.map((id) => ({ id, cpus: 2, args: agentArgs })) });
    app = await connect({ name: "bench-weights", head: cluster.endpoint });
    const module = { module: path.join(HERE, "weights-service.js"), export: "WeightsRollout" };
    const long = { timeoutMs: 3_600_000 };
    // 1.5 of each agent's 2 CPUs: one rollout per agent, and room left on agent a (the first, most free at ties) for the late joiner.
    const pool = (await app.service<WeightsRollout>(module, { name: "rollout", warmup: rollouts, max: rollouts, resreq: "cpu=1.5" })).withOptions(long) as PoolHandle<WeightsRollout>;
    const members = await pool.members();
    const readerConfig = synthetic ? { synthetic_bytes: opts.bytes, zeros: true } : preset;
    const infos = await Promise.all(members.map((m) => pool.callMember(m.executorId, "setup", readerConfig, opts.threads)));
    const perAgent = new Map<string, string[]>();
    for (const i of infos) perAgent.set(i.agentId, [...(perAgent.get(i.agentId) ?? []), i.executorId]);
    if (infos.length !== rollouts || perAgent.size !== rollouts) throw new Error(`placement: wanted one of ${rollouts} executors on each agent, got ${JSON.stringify([...perAgent])}`);
    log(`executors: ${infos.map((i) => `${i.executorId}@${i.agentId}`).join(", ")}`);

    // The fresh-page bound: each process of a full publication writes the weights once into new files
    // (the publisher's scratch, the head's spool, every node's copy); a raw stream into a new file on each
    // of those media, measured here, is as fast as such writes go on this machine.
    const st0 = await cluster.status();
    const cacheOf = (st0.agents as Array<{ id: string; cache?: { dir?: string; medium?: string } }>).find((a) => a.id === "a")?.cache;
    const spool = st0.objects.spool as { medium: string; dir: string | null } | null;
    const media: Array<{ process: string; medium: string; dir: string; count: number }> = [
      { process: "publisher (scratch)", medium: "temp folder", dir: os.tmpdir(), count: 1 },
      ...(spool?.dir ? [{ process: "head (spool)", medium: spool.medium, dir: spool.dir, count: 1 }] : []),
      ...(cacheOf?.dir ? [{ process: "node cache (each)", medium: cacheOf.medium ?? "disk", dir: cacheOf.dir, count: rollouts }] : []),
    ];
    const rates = new Map<string, number>();
    const writes: FreshWrite[] = [];
    for (const m of media) {
      if (!rates.has(m.dir)) rates.set(m.dir, await rawStream(weightBytes, true, m.dir));
      const rawMiBps = rates.get(m.dir)!;
      writes.push({ process: m.process, medium: m.medium, dir: m.dir, bytes: weightBytes, rawMiBps, ms: (weightBytes / MiB / rawMiBps) * 1000 });
    }
    const freshPages: FreshPages = { writes, boundMs: Math.max(...writes.map((w) => w.ms)) };
    log(`fresh pages: ${writes.map((w) => `${w.process} on ${w.medium} ${w.rawMiBps.toFixed(0)} MiB/s → ${w.ms.toFixed(0)} ms`).join("; ")}; bound ${freshPages.boundMs.toFixed(0)} ms`);

    const key = "weights";
    let exportMs = 0;
    let engineSeconds: Record<string, number> = {};
    const engine = publisherEngine;
    // The publisher's engine, its publish timed apart from the upload that overlaps it.
    const timedEngine = {
      publishFiles: async (dir: string, o: Parameters<TensorEngine["publishFiles"]>[1]) => {
        const t = performance.now();
        const pub = await engine.publishFiles(dir, { ...o, timeoutMs: 3_600_000 });
        exportMs = performance.now() - t;
        engineSeconds = pub.seconds;
        return pub;
      },
    } as unknown as TensorEngine;
    const publisher = new WeightPublisher(app.objects, key, timedEngine, DEFAULT_REBASE, { keepLast: !synthetic });

    const pids: Record<string, number[]> = {
      head: [cluster.head.pid!],
      agents: [...cluster.agents.values()].map((p) => p.pid!),
      executors: infos.map((i) => i.pid),
      "executor engines": infos.map((i) => i.enginePid),
      "publisher engine": [engine.pid!],
      driver: [process.pid],
    };
    const steps: WeightsStepResult[] = [];
    let seed = 1;
    const started = cluster;
    const runStep = async (spec: WeightsStepSpec): Promise<void> => {
      if (spec.share > 0) await engine.perturb({ share: spec.share, seed: seed++, dense: spec.dense }, { timeoutMs: 600_000 });
      for (const list of Object.values(pids)) list.forEach(resetPeak);
      const loadBefore = os.loadavg()[0]!;
      const cpu0 = Object.fromEntries(Object.entries(pids).map(([role, list]) => [role, list.reduce((n, p) => n + cpuSeconds(p), 0)]));
      const headBefore = (await started.status()).objects.traffic as { bytesOut: number; bytesOutTo: Record<string, number> };
      const t0 = performance.now();
      const stats = await publisher.publish({ full: spec.full === true });
      const commitAt = Date.now();
      const publishMs = performance.now() - t0;
      const executors = await Promise.all(infos.map((i) => pool.callMember(i.executorId, "sync", key)));
      const slowestMs = performance.now() - t0;
      const cpuS = Object.fromEntries(Object.entries(pids).map(([role, list]) => [role, list.reduce((n, p) => n + cpuSeconds(p), 0) - cpu0[role]!]));
      const peakRssMiB: Record<string, number> = {};
      for (const [role, list] of Object.entries(pids)) peakRssMiB[role] = Math.max(...list.map((p) => readKiB(p, "VmHWM"))) / 1024;
      const want = (await engine.digest({ timeoutMs: 1_800_000 })).digest;
      const got = await Promise.all(infos.map((i) => pool.callMember(i.executorId, "digest")));
      const identical = got.every((g) => g.digest === want) && executors.every((e) => e.version === stats.version);
      const status = await started.status();
      const traffic = status.objects.traffic as { bytesOut: number; bytesOutTo: Record<string, number> };
      const nodes: NodeCopy[] = [];
      for (const [agentId, ids] of perAgent) {
        const st = (await pool.callMember(ids[0]!, "nodeStat")) as unknown as NodeStat;
        const copy = st.recent.filter((f) => f.key === key && f.version === stats.cacheVersion).at(-1);
        if (copy) nodes.push({ agentId, commitToCopyMs: copy.doneAt - commitAt, source: copy.source, bytes: copy.bytes });
      }
      const firsts = executors.map((e) => e.firstAppliedAt).filter((v): v is number => v !== null);
      const r: WeightsStepResult = {
        ...spec,
        kind: stats.kind,
        version: stats.version,
        bytes: stats.bytes,
        changed: stats.changed,
        elements: stats.elements,
        denseTensors: stats.dense,
        sparseTensors: stats.sparse,
        bytesPerChanged: stats.bytes / Math.max(1, stats.changed),
        exportMs,
        engineMs: Object.fromEntries(Object.entries(engineSeconds).map(([k, v]) => [k, v * 1000])),
        publishMs,
        executors,
        nodes,
        commitToFirstAppliedMs: firsts.length ? { first: Math.min(...firsts) - commitAt, last: Math.max(...firsts) - commitAt } : null,
        commitToLastExactMs: Math.max(...executors.map((e) => e.doneAt)) - commitAt,
        slowestMs,
        executorTcpBytes: executors.reduce((n, e) => n + e.bytes, 0),
        headBytesOut: traffic.bytesOut - headBefore.bytesOut,
        headBytesOutTo: Object.fromEntries(Object.entries(traffic.bytesOutTo).map(([k, v]) => [k, v - (headBefore.bytesOutTo[k] ?? 0)])),
        identical,
        peakRssMiB,
        cpuS,
        headObjectBytes: status.objects.bytes as number,
        load: [loadBefore, os.loadavg()[0]!],
      };
      steps.push(r);
      log(`${spec.name}: ${(r.bytes / MiB).toFixed(1)} MiB, publish ${publishMs.toFixed(0)} ms, commit → last exact ${r.commitToLastExactMs.toFixed(0)} ms, slowest executor ${slowestMs.toFixed(0)} ms, identical: ${identical}`);
      if (!identical) throw new Error(`${spec.name}: an executor is not bit-identical to the publisher (publisher ${want}, executors ${JSON.stringify(got)})`);
    };
    for (const spec of opts.steps ?? (synthetic ? [{ name: "full publication (synthetic)", share: 0, full: true }] : defaultSteps(DENSE_TENSOR))) await runStep(spec);

    // A late joiner on a warm node (agent a): a new executor that reads the node's copies (base and patches) in place.
    // (Not with synthetic weights: a fourth engine of a 6 GB publication would not fit beside the others.)
    let lateJoiner: WeightsBenchResult["lateJoiner"] = null;
    if (!synthetic) {
      const late = (await app.service<WeightsRollout>(module, { name: "late", warmup: 1, max: 1, resreq: "cpu=0.5" })).withOptions(long) as PoolHandle<WeightsRollout>;
      const [lateMember] = await late.members();
      if (lateMember!.agentId !== "a") throw new Error(`the late joiner landed on agent ${lateMember!.agentId}, not on the warm node a`);
      await late.callMember(lateMember!.executorId, "setup", readerConfig, opts.threads);
      const joined = await late.callMember(lateMember!.executorId, "sync", key);
      const want = (await engine.digest({ timeoutMs: 1_800_000 })).digest;
      const lateDigest = await late.callMember(lateMember!.executorId, "digest");
      lateJoiner = { ...joined, identical: lateDigest.digest === want && joined.version === steps.at(-1)!.version };
      log(`late joiner: ${joined.applied.join(" + ")} (${(joined.appliedBytes / MiB).toFixed(1)} MiB) in ${joined.totalMs.toFixed(0)} ms, identical: ${lateJoiner.identical}`);
      if (!lateJoiner.identical) throw new Error(`the late joiner is not bit-identical to the publisher (${lateDigest.digest} vs ${want})`);
    }

    // A node that joins after the patches (agent "late"): its cache copies the base from a node that holds
    // it and only the patches from the head; the head's bytes to it are counted.
    let newNode: NewNodeJoin | null = null;
    if (!synthetic) {
      await cluster.addAgent({ id: "late", cpus: 2, args: agentArgs });
      // Two CPUs: only the new node has them free.
      const fresh = (await app.service<WeightsRollout>(module, { name: "new-node", warmup: 1, max: 1, resreq: "cpu=2" })).withOptions(long) as PoolHandle<WeightsRollout>;
      const [m] = await fresh.members();
      if (m!.agentId !== "late") throw new Error(`the new node's executor landed on agent ${m!.agentId}, not on the new node`);
      await fresh.callMember(m!.executorId, "setup", readerConfig, opts.threads);
      const headTo = async (): Promise<number> => (((await cluster!.status()).objects.traffic as { bytesOutTo: Record<string, number> }).bytesOutTo.agent ?? 0);
      const before = await headTo();
      const joined = await fresh.callMember(m!.executorId, "sync", key);
      const headBytes = (await headTo()) - before;
      const want = (await engine.digest({ timeoutMs: 1_800_000 })).digest;
      const digest = await fresh.callMember(m!.executorId, "digest");
      const st = (await fresh.callMember(m!.executorId, "nodeStat")) as unknown as NodeStat;
      const base = steps.find((x) => x.full)?.bytes ?? 0;
      newNode = {
        ...joined,
        identical: digest.digest === want && joined.version === steps.at(-1)!.version,
        headBytes,
        fromPeers: st.fetches.bytesFromPeers,
        fromHead: st.fetches.bytesFromHead,
        baseFromHead: Math.max(0, base - st.fetches.bytesFromPeers),
        source: st.recent.filter((f) => f.key === key).at(-1)?.source ?? "-",
      };
      log(`new node after ${steps.length - 1} patches: exact in ${joined.totalMs.toFixed(0)} ms, head sent it ${(headBytes / MiB).toFixed(2)} MiB (${newNode.source}), identical: ${newNode.identical}`);
      if (!newNode.identical) throw new Error(`the new node's executor is not bit-identical to the publisher (${digest.digest} vs ${want})`);
    }

    // A full re-publication (a re-base) of weights every node holds: the nodes copy its parts while it
    // uploads (obj-sealed) and install them at the commit. Last, so the late joiner above met four patches.
    if (!synthetic && !opts.steps) await runStep(REPUBLICATION);

    const distribution = await runDistributionBench(DISTRIBUTION_DEFAULTS, log);
    return {
      shape: opts.shape,
      preset,
      params: init.params,
      weightBytes,
      steps,
      lateJoiner,
      newNode,
      freshPages,
      distribution,
      rawZmqMiBps,
      rawZmqToFileMiBps,
      placement: Object.fromEntries(infos.map((i) => [i.executorId, i.agentId])),
      cores: os.availableParallelism(),
    };
  } finally {
    await publisherEngine?.close();
    await app?.close();
    await cluster?.stop();
  }
}

function parseArgs(args: string[]): WeightsBenchOptions {
  const o: WeightsBenchOptions = { shape: "0.5b", threads: 1 };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--shape") o.shape = args[++i] ?? o.shape;
    else if (a === "--bytes") {
      o.shape = "synthetic";
      o.bytes = Math.floor(parseByteSize(args[++i] ?? "") / 2) * 2;
      o.rollouts ??= 2;
    } else if (a === "--rollouts") o.rollouts = Number(args[++i] ?? 3);
    else if (a === "--threads") o.threads = Number(args[++i] ?? 1);
    else if (a === "--publisher-threads") o.publisherThreads = Number(args[++i] ?? 2);
    else throw new Error(`bench weights: unknown argument ${a} (--shape tiny|0.5b|1.5b, --bytes SIZE, --rollouts N, --threads N, --publisher-threads N)`);
  }
  return o;
}

/** Runs the benchmark and prints the tables. */
export async function benchWeights(args: string[]): Promise<WeightsBenchResult> {
  const o = parseArgs(args);
  const r = await runWeightsBench({ ...o, log: (l) => console.log(l) });
  printWeightsBench(r, o);
  return r;
}
