/**
 * `npm run bench -- soak [--steps N] [--every N] [--lags 0,1] [--keep-steps N]`:
 * long runs on the embedded default (a fresh HEARTH_HOME: the local head
 * with its data dir and the local agent, started as a user's first run
 * would) with the tiny model on the easy task, a 20-step warm start, coin-flip
 * rewards (every step trains) and a learning rate of 1e-6, one
 * run per max lag (default 2,000 steps at K = 0, then at K = 1). Every
 * `every` steps it samples the resident memory of every process (head,
 * agent, each executor and tensor engine, and this driver) from
 * /proc/PID/status, and the head's objects (count and bytes from its status,
 * files and bytes in its data dir). It prints, per process, the growth per
 * 1,000 steps of a least-squares line through the samples from step 100 on,
 * as a share of the line's value at step 100 (goal: within 5 %; and the same
 * fit over the second half, where a process that settles is flat), and the
 * objects held against the inspection window (goal: flat at its size).
 * After each run closes it prints what the head still holds.
 */
import { readFileSync, readdirSync, rmSync, mkdtempSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { connect } from "../sdk/connect.js";
import { stopLocalCluster } from "../sdk/engines/local.js";
import { rng } from "../sdk/rl/random.js";
import { SearchR1Run } from "../sdk/envs/searchr1/run.js";
import { table } from "./stats.js";

const MiB = 1024 * 1024;
/** Samples before this step are left out of the growth fit (warm-up: engines, caches, JIT). */
const FROM_STEP = 100;
/** Every parameter still changes every step (Adam), so publications stay full-sized; the policy barely moves. */
const SOAK_LR = 1e-6;

/**
 * Seeded coin flips as rewards: they vary within groups whatever the policy
 * writes, so every step trains (and makes its slices and a publication). A
 * learnable reward would let the policy collapse to equal rewards (the steps
 * stop training); with a learning rate of 1e-6 (SOAK_LR) the policy does not
 * drift either, so step 2,000 does the work of step 100 (at 1e-3 the coin
 * flips walk it to responses of maximum length, and memory follows the
 * workload instead of the code).
 */
function coinFlips(seed: number): () => number {
  const r = rng(seed);
  return () => (r() < 0.5 ? 0 : 1);
}

/** One sample: resident MiB per process, and the head's objects. */
interface Sample {
  step: number;
  rss: Record<string, number>;
  heap: Record<string, HeapFigures>;
  objects: number;
  objectBytes: number;
  diskFiles: number;
  diskBytes: number;
}

/** Resident set size of `pid` in MiB, or undefined when it is gone. */
function rssOf(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Files and bytes in `dir` (the head's objects folder). */
function diskUsage(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {
    // Not made yet.
  }
  for (const f of names) {
    try {
      bytes += statSync(path.join(dir, f)).size;
      files++;
    } catch {
      // Deleted (or renamed into place) since the listing.
    }
  }
  return { files, bytes };
}

/** V8's figures of a Node process (MiB): heap total and used, external. */
interface HeapFigures {
  heapTotal: number;
  heapUsed: number;
  external: number;
}

function heapOf(m: { heapTotal: number; heapUsed: number; external: number } | null | undefined): HeapFigures | undefined {
  return m ? { heapTotal: m.heapTotal / MiB, heapUsed: m.heapUsed / MiB, external: m.external / MiB } : undefined;
}

/** Every process of the cluster under a stable label, from the head's status (Node processes with the V8 figures of their last heartbeat). */
function processes(status: any): Array<{ label: string; pid: number; heap?: HeapFigures }> {
  const out: Array<{ label: string; pid: number; heap?: HeapFigures }> = [
    { label: "driver", pid: process.pid, heap: heapOf(process.memoryUsage()) },
    { label: "head", pid: status.head.pid as number, heap: heapOf(status.head.memory) },
  ];
  for (const a of status.agents) out.push({ label: `agent ${a.id}`, pid: a.pid, heap: heapOf(a.memory) });
  for (const app of status.apps) {
    for (const s of app.services) {
      for (const [i, e] of (s.executors as any[]).entries()) {
        const name = `${s.name} ${e.rank ?? i}`;
        if (e.pid) out.push({ label: name, pid: e.pid, heap: heapOf(e.memory) });
        for (const [j, g] of (e.engines as any[]).entries()) if (g.pid) out.push({ label: `${name} engine${j > 0 ? ` ${j}` : ""}`, pid: g.pid });
      }
    }
  }
  return out;
}

/** Least-squares line of y over x. */
function fit(xs: number[], ys: number[]): { slope: number; at: (x: number) => number } {
  const n = xs.length;
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = ys.reduce((a, b) => a + b, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (let i = 0; i < n; i++) {
    sxy += (xs[i]! - mx) * (ys[i]! - my);
    sxx += (xs[i]! - mx) ** 2;
  }
  const slope = sxx === 0 ? 0 : sxy / sxx;
  return { slope, at: (x) => my + slope * (x - mx) };
}

/** Growth per 1,000 steps from step FROM_STEP on: absolute, and as a share of the line's value there. */
function growth(samples: Sample[], value: (s: Sample) => number | undefined, from = FROM_STEP): { first: number; last: number; per1k: number; pct: number } | undefined {
  const pts = samples.filter((s) => s.step >= from && value(s) !== undefined);
  if (pts.length < 2) return undefined;
  const f = fit(pts.map((s) => s.step), pts.map((s) => value(s)!));
  const base = f.at(from);
  return { first: value(pts[0]!)!, last: value(pts.at(-1)!)!, per1k: f.slope * 1000, pct: base > 0 ? (100 * f.slope * 1000) / base : 0 };
}

/** One run of `steps` steps at max lag `lag`, sampled every `every` steps; prints its tables. */
async function soakRun(home: string, work: string, lag: number, steps: number, every: number, keepSteps: number | undefined): Promise<void> {
  const name = `soak-k${lag}`;
  const run = await SearchR1Run.create({
    name,
    out: path.join(work, name),
    data: "synthetic-easy",
    bootstrapSteps: 20,
    promptsPerStep: 8,
    promptsPerTask: 2,
    groupSize: 4,
    evalEvery: 100,
    evalSize: 16,
    maxLag: lag,
    lr: SOAK_LR,
    checkpoint: false,
    replace: true,
    log: () => undefined,
    ...(keepSteps !== undefined ? { keepSteps } : {}),
  });
  run.setReward(coinFlips(lag + 1));
  const window = run.opts.keepSteps;
  const objectsDir = path.join(home, "data", "objects");
  const samples: Sample[] = [];
  const sample = async (): Promise<void> => {
    const status = (await run.app.status()) as any;
    const rss: Record<string, number> = {};
    const heap: Record<string, HeapFigures> = {};
    for (const p of processes(status)) {
      const r = rssOf(p.pid);
      if (r !== undefined) rss[p.label] = r;
      if (p.heap) heap[p.label] = p.heap;
    }
    const disk = diskUsage(objectsDir);
    samples.push({ step: run.stepsDone, rss, heap, objects: status.objects.objects, objectBytes: status.objects.bytes, diskFiles: disk.files, diskBytes: disk.bytes });
  };
  const t0 = performance.now();
  const load0 = os.loadavg();
  let after: any;
  try {
    await sample();
    // Steps one by one (not train(n)): with a max lag the next step's rollouts are always in flight, as in a long notebook session.
    while (run.stepsDone < steps) {
      await run.step();
      if (run.stepsDone % every === 0) await sample();
    }
  } finally {
    await run.close();
    after = await headStatus(run);
  }
  const seconds = (performance.now() - t0) / 1000;
  const load1 = os.loadavg();
  console.log(`\n## max lag ${lag}: ${steps} steps in ${(seconds / 60).toFixed(1)} min (${((1000 * seconds) / steps).toFixed(0)} ms a step), inspection window ${window} steps`);
  console.log(`load average before ${load0.map((x) => x.toFixed(2)).join(" ")}, after ${load1.map((x) => x.toFixed(2)).join(" ")} (${os.cpus().length} cores)\n`);
  const labels = [...new Set(samples.flatMap((s) => Object.keys(s.rss)))];
  const rows: Array<Record<string, string | number>> = [];
  const row = (what: string, value: (s: Sample) => number | undefined, unit: number, digits: number): void => {
    const g = growth(samples, value);
    if (!g) return;
    // The same fit over the run's second half: a process that settles (the allocator, V8's heap sizing) is flat there; a leak is not.
    const half = Math.max(FROM_STEP, Math.floor(steps / 2 / every) * every);
    const late = growth(samples, value, half);
    const max = Math.max(...samples.filter((s) => s.step >= FROM_STEP).map((s) => value(s) ?? -Infinity));
    rows.push({
      what,
      [`@${FROM_STEP}`]: (g.first / unit).toFixed(digits),
      "@end": (g.last / unit).toFixed(digits),
      max: (max / unit).toFixed(digits),
      "fit / 1k steps": (g.per1k / unit).toFixed(2),
      "% / 1k steps": g.pct.toFixed(1),
      "≤ 5 %": g.pct <= 5 ? "yes" : "NO",
      [`% / 1k from @${half}`]: late ? late.pct.toFixed(1) : "-",
    });
  };
  for (const label of labels) row(`RSS MiB: ${label}`, (s) => s.rss[label], 1, 1);
  row("head objects", (s) => s.objects, 1, 0);
  row("head object MiB", (s) => s.objectBytes, MiB, 1);
  row("data dir files", (s) => s.diskFiles, 1, 0);
  row("data dir MiB", (s) => s.diskBytes, MiB, 1);
  console.log(table(rows));
  console.log(`\nRSS MiB every ${every * 5} steps (a line that levels off is the allocator settling; one that keeps rising is a leak):`);
  const coarse = samples.filter((s) => s.step % (every * 5) === 0);
  console.log(table(labels.map((label) => ({ process: label, ...Object.fromEntries(coarse.map((s) => [`@${s.step}`, s.rss[label] === undefined ? "-" : s.rss[label]!.toFixed(0)])) }))));
  console.log(`\nV8 heap total / used / external MiB of the Node processes (the rest of their RSS is native: code, libzmq, the allocator):`);
  const heapLabels = labels.filter((l) => samples.some((s) => s.heap[l]));
  console.log(table(heapLabels.map((label) => ({ process: label, ...Object.fromEntries(coarse.map((s) => {
    const h = s.heap[label];
    return [`@${s.step}`, h ? `${h.heapTotal.toFixed(0)}/${h.heapUsed.toFixed(0)}/${h.external.toFixed(0)}` : "-"];
  })) }))));
  console.log(`\nsamples (step: head objects / data dir files, MiB):`);
  console.log(samples.map((s) => `${s.step}: ${s.objects}/${s.diskFiles}, ${(s.diskBytes / MiB).toFixed(1)}`).join("  "));
  const kept = samples.filter((s) => s.step >= window + FROM_STEP).map((s) => s.objects);
  if (kept.length > 0) console.log(`head objects once the window is full: min ${Math.min(...kept)}, max ${Math.max(...kept)} (the window's steps plus the run's own objects)`);
  console.log(`after the run closed the head holds ${after.objects.objects} object(s), ${(after.objects.bytes / MiB).toFixed(1)} MiB; data dir ${diskUsage(objectsDir).files} files`);
  const logs = diskUsage(path.join(home, "logs"));
  const execLogs = diskUsage(path.join(home, "agent", "logs"));
  console.log(`logs: HEARTH_HOME/logs ${logs.files} files, ${(logs.bytes / 1024).toFixed(0)} KiB; the agent's executor logs ${execLogs.files} files, ${(execLogs.bytes / 1024).toFixed(0)} KiB; metrics.jsonl ${(statSync(path.join(work, name, "metrics.jsonl")).size / 1024).toFixed(0)} KiB`);
}

/** The head's status, through a short-lived app of its own (the run's app was released). */
async function headStatus(run: SearchR1Run): Promise<any> {
  const app = await connect({ name: `${run.app.name}-after` });
  try {
    return await app.status();
  } finally {
    await app.close();
  }
}

/** Runs the soak and prints the tables. */
export async function benchSoak(args: string[]): Promise<void> {
  const { values } = parseArgs({ args, options: { steps: { type: "string" }, every: { type: "string" }, lags: { type: "string" }, "keep-steps": { type: "string" } }, strict: true });
  const steps = Number(values.steps ?? 2000);
  const every = Number(values.every ?? 50);
  const lags = (values.lags ?? "0,1").split(",").map(Number);
  const keepSteps = values["keep-steps"] !== undefined ? Number(values["keep-steps"]) : undefined;
  for (const [what, v] of [["--steps", steps], ["--every", every], ...lags.map((l) => ["--lags", l] as const)] as const) {
    if (!Number.isInteger(v) || v < (what === "--lags" ? 0 : 1)) throw new Error(`${what} must be a whole number; got ${String(v)}`);
  }
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-bench-soak-"));
  const home = path.join(work, "home");
  process.env.HEARTH_HOME = home;
  console.log(`soak: the tiny model on the easy task (a 20-step warm start), coin-flip rewards at lr ${SOAK_LR}, 8 prompts × 4 samples a step in 4 rollout calls, 2 rollouts, 2 trainers, eval every 100 steps on 16 questions; the embedded default in a fresh HEARTH_HOME; RSS sampled every ${every} steps, growth fitted from step ${FROM_STEP}`);
  try {
    for (const lag of lags) await soakRun(home, work, lag, steps, every, keepSteps);
  } finally {
    await stopLocalCluster(home);
    rmSync(work, { recursive: true, force: true });
  }
}
