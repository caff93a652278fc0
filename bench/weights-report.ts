/** The tables `npm run bench -- weights` prints (bench/weights.ts runs it). */
import type { WeightsBenchOptions, WeightsBenchResult } from "./weights.js";
import { DEFAULT_REBASE } from "../sdk/rl/services/weights.js";
import { table } from "./stats.js";

const MiB = 1024 * 1024;
const ms = (v: number): number => Math.round(v);
/** The reference's sparse encoding: an int32 index and a bf16 value per changed value. */
const REFERENCE_BYTES_PER_CHANGE = 6;

/** Prints a run's tables: per step, per node, per executor, memory, and the goals' ratios. */
export function printWeightsBench(r: WeightsBenchResult, o: WeightsBenchOptions): void {
  console.log(`\n${r.preset} (${(r.params / 1e6).toFixed(1)} M params, ${(r.weightBytes / MiB).toFixed(0)} MiB bf16), ${o.threads} torch thread(s) per rollout engine, ${o.publisherThreads ?? 2} in the publisher's; executors ${JSON.stringify(r.placement)}\n`);
  console.log(
    table(
      r.steps.map((s) => ({
        step: s.name,
        kind: s.kind,
        MiB: s.bytes / MiB,
        "changed %": (100 * s.changed) / s.elements,
        dense: s.denseTensors,
        "B/changed": s.kind === "patch" ? s.bytesPerChanged : 0,
        "export ms": ms(s.exportMs),
        "publish→commit": ms(s.publishMs),
        "commit→node copy (max)": s.nodes.length ? ms(Math.max(...s.nodes.map((n) => n.commitToCopyMs))) : "-",
        "commit→1st applied": s.commitToFirstAppliedMs ? ms(s.commitToFirstAppliedMs.first) : "-",
        "commit→last exact": ms(s.commitToLastExactMs),
        "slowest ms": ms(s.slowestMs),
        "TCP→executors MiB": s.executorTcpBytes / MiB,
        "head out MiB": s.headBytesOut / MiB,
        identical: s.identical ? "yes" : "NO",
      })),
    ),
  );
  console.log("\nper node: commit → its copy complete (source), MiB/s of the copy");
  for (const s of r.steps) {
    console.log(`  ${s.name}: ${s.nodes.map((n) => `${n.agentId} ${ms(n.commitToCopyMs)} ms (${n.source}, ${(n.bytes / MiB / Math.max(0.001, n.commitToCopyMs / 1000)).toFixed(0)} MiB/s)`).join(", ")}`);
  }
  console.log("\nper executor: fetch / apply ms, bytes over TCP");
  for (const s of r.steps) console.log(`  ${s.name}: ${s.executors.map((e) => `${e.executorId}@${e.agentId} ${ms(e.fetchMs)}/${ms(e.applyMs)} (${(e.bytes / MiB).toFixed(2)} MiB)`).join(", ")}`);
  console.log("\nhead bytes out by peer kind (MiB), and load average (1 min) before → after");
  for (const s of r.steps) console.log(`  ${s.name}: ${Object.entries(s.headBytesOutTo).map(([k, v]) => `${k} ${(v / MiB).toFixed(1)}`).join(", ")}; load ${s.load[0].toFixed(2)} → ${s.load[1].toFixed(2)}`);
  console.log("\npeak RSS (MiB) per step: head / agents / executors (Node) / executor engines / publisher engine / driver; head object bytes");
  for (const s of r.steps) {
    const p = s.peakRssMiB;
    console.log(`  ${s.name}: ${ms(p.head!)} / ${ms(p.agents!)} / ${ms(p.executors!)} / ${ms(p["executor engines"]!)} / ${ms(p["publisher engine"]!)} / ${ms(p.driver!)}; ${(s.headObjectBytes / MiB).toFixed(1)} MiB`);
  }
  console.log(`\nraw ZeroMQ stream, same bytes and chunking: ${r.rawZmqMiBps.toFixed(0)} MiB/s into memory, ${r.rawZmqToFileMiBps.toFixed(0)} MiB/s into a file`);
  const lj = r.lateJoiner;
  if (lj) console.log(`late joiner (warm node): ${lj.applied.join(" + ")}, ${(lj.appliedBytes / MiB).toFixed(1)} MiB applied, ${(lj.bytes / MiB).toFixed(2)} MiB over TCP, ${ms(lj.totalMs)} ms (goal ≤ 1000 ms at 0.5b), identical: ${lj.identical ? "yes" : "NO"}`);
  const full = r.steps.find((s) => s.full);
  const patch = r.steps.find((s) => s.name === "patch 2.7 %");
  if (full) {
    const first = full.nodes.find((n) => n.source === "head") ?? full.nodes[0];
    const copyMiBps = first ? full.bytes / MiB / (first.commitToCopyMs / 1000) : 0;
    console.log(
      `\nfull publication: node copy from the head at ${copyMiBps.toFixed(0)} MiB/s = ${(copyMiBps / r.rawZmqMiBps).toFixed(2)}× the raw stream (goal ≥ 0.8×); ` +
        `slowest executor exact ${ms(full.slowestMs)} ms after the publication started (goal ≤ 3000 ms at 0.5b), ${ms(full.commitToLastExactMs)} ms after its commit; ` +
        `head sent ${(full.headBytesOut / full.bytes).toFixed(2)}× the object`,
    );
  }
  if (full && patch) {
    console.log(
      `at 2.7 %: slowest executor bit-identical ${ms(patch.slowestMs)} ms after publication started (goal ≤ 1000 ms); full-weights path ${ms(full.slowestMs)} ms: ${(full.slowestMs / patch.slowestMs).toFixed(1)}×; ` +
        `${patch.bytesPerChanged.toFixed(2)} B per changed value = ${(patch.bytesPerChanged / REFERENCE_BYTES_PER_CHANGE).toFixed(2)}× the reference's 6 B (goal ≤ 0.5×)`,
    );
  }
  console.log(`re-base policy: ${DEFAULT_REBASE.maxPatches} patches or ${DEFAULT_REBASE.maxPatchShare} of the base`);
}
