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
  console.log("\nCPU seconds per step, publication start → last exact (2 cores): head / agents / executors (Node) / executor engines / publisher engine / driver, and the step's wall seconds");
  for (const s of r.steps) {
    const c = s.cpuS;
    console.log(`  ${s.name}: ${[c.head, c.agents, c.executors, c["executor engines"], c["publisher engine"], c.driver].map((v) => (v ?? 0).toFixed(1)).join(" / ")}; wall ${(s.slowestMs / 1000).toFixed(1)} s`);
  }
  console.log(`\nraw ZeroMQ stream, same bytes and chunking: ${r.rawZmqMiBps.toFixed(0)} MiB/s into memory, ${r.rawZmqToFileMiBps.toFixed(0)} MiB/s into a file`);
  const lj = r.lateJoiner;
  if (lj) console.log(`late joiner (warm node): ${lj.applied.join(" + ")}, ${(lj.appliedBytes / MiB).toFixed(1)} MiB applied, ${(lj.bytes / MiB).toFixed(2)} MiB over TCP, ${ms(lj.totalMs)} ms (fetch ${ms(lj.fetchMs)} + apply ${ms(lj.applyMs)}; goal ≤ 1000 ms at 0.5b), identical: ${lj.identical ? "yes" : "NO"}`);
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
  if (full) {
    const fp = r.freshPages;
    console.log(`\nfresh-page bound: ${fp.writes.map((w) => `${w.process} writes ${(w.bytes / MiB).toFixed(0)} MiB on ${w.medium} (${w.dir}) at ${w.rawMiBps.toFixed(0)} MiB/s raw = ${ms(w.ms)} ms`).join("; ")}; bound ${ms(fp.boundMs)} ms (the slowest process's fresh writes)`);
    for (const f of r.steps.filter((s) => s.full)) {
      const slowest = f.executors.reduce((a, e) => (e.totalMs > a.totalMs ? e : a), f.executors[0]!);
      const engine = Object.entries(f.engineMs).map(([k, v]) => `${k} ${ms(v)}`).join(", ");
      console.log(
        `phases of the ${f.name} (ms from the publication's start unless said): engine export ${ms(f.exportMs)}${engine ? ` (${engine})` : ""}, ` +
          `upload committed ${ms(f.publishMs)} (overlaps the export); from the commit: node copies ${f.nodes.map((n) => `${n.agentId} ${ms(n.commitToCopyMs)} (${n.source})`).join(", ")}, ` +
          `first applied ${f.commitToFirstAppliedMs ? ms(f.commitToFirstAppliedMs.first) : "-"}, last exact ${ms(f.commitToLastExactMs)}; slowest executor's sync: fetch ${ms(slowest.fetchMs)} + apply ${ms(slowest.applyMs)}; slowest exact ${ms(f.slowestMs)} (goal ≤ 5000 at 0.5b)`,
      );
      console.log(`  the path took ${ms(f.slowestMs)} ms = ${(f.slowestMs / fp.boundMs).toFixed(2)}× the fresh-page bound (goal ≤ 1.3× where the bound forbids 5 s)`);
      // The fresh-page bound gives each process a core of its own; here they share r.cores, so the work itself bounds the path too.
      const work = Object.values(f.cpuS).reduce((a, b) => a + b, 0);
      const floorMs = (work / r.cores) * 1000;
      console.log(`  its processes used ${work.toFixed(1)} CPU-s on ${r.cores} cores: no schedule of that work ends before ${ms(floorMs)} ms (the CPU floor); the path took ${(f.slowestMs / floorMs).toFixed(2)}× it`);
    }
    const toAgents = full.headBytesOutTo.agent ?? 0;
    const nn = r.newNode;
    console.log(
      `head bytes out for the base: ${(toAgents / MiB).toFixed(1)} MiB to the nodes for the full publication` +
        (nn ? ` and ${(nn.baseFromHead / MiB).toFixed(1)} MiB for the new node's base` : "") +
        ` = ${((toAgents + (nn?.baseFromHead ?? 0)) / full.bytes).toFixed(2)}× the object (goal 1.00×)`,
    );
  }
  const nn = r.newNode;
  if (nn) console.log(`new node after the patches: exact ${ms(nn.totalMs)} ms (goal ≤ 1000 ms at 0.5b), ${(nn.fromPeers / MiB).toFixed(1)} MiB from peers, ${(nn.fromHead / MiB).toFixed(2)} MiB from the head (head counted ${(nn.headBytes / MiB).toFixed(2)} MiB; goal 0 when a peer holds the base), source ${nn.source}, identical: ${nn.identical ? "yes" : "NO"}`);
  for (const d of r.distribution) console.log(`simulated distribution to ${d.nodes} nodes, ${d.shape}: depth ${d.depth}, last node ${ms(d.lastNodeMs)} ms`);
  console.log(`re-base policy: ${DEFAULT_REBASE.maxPatches} patches or ${DEFAULT_REBASE.maxPatchShare} of the base`);
}
