/**
 * `npm run bench -- snapshot [steps]`: what `--snapshot-every 1` costs. The
 * demo's run (the shipped tiny chain policy, 16 prompts × 8, 2 rollouts, a
 * gang of 2) on a cluster of its own (a head and one agent, as the embedded
 * default); each step is timed, then the trainers' snapshot after it
 * (rank 0 saves, ships the model and exact state into the head, the record
 * replaces the last one). Prints the snapshot's bytes, its time and its
 * share of the step measured in the same run. Time it with the machine quiet.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SearchR1Run } from "../sdk/envs/searchr1/run.js";
import { startCluster } from "../test/helpers/cluster.js";
import { table } from "./stats.js";

export async function benchSnapshot(args: string[]): Promise<void> {
  const steps = Number(args[0] ?? 8);
  if (!Number.isInteger(steps) || steps < 1) throw new Error(`usage: npm run bench -- snapshot [steps ≥ 1]; got ${args[0]}`);
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-bench-snapshot-"));
  process.env.HEARTH_HOME = path.join(work, "home");
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 3, mem: "8g" }] });
  try {
    const run = await SearchR1Run.create({ head: cluster.endpoint, name: "bench-snapshot", out: path.join(work, "out"), evalEvery: 0, log: () => undefined });
    try {
      const rows: Array<Record<string, string | number>> = [];
      for (let i = 0; i < steps; i++) {
        const m = (await run.step()).metrics;
        const t0 = performance.now();
        const snap = await run.snapshot();
        const ms = performance.now() - t0;
        rows.push({ step: m.step, "step s": m.step_s.toFixed(2), trained: m.samples_trained, "snapshot MB": (snap.bytes / 1e6).toFixed(2), "snapshot ms": ms.toFixed(0), "share of step": `${((ms / 1000 / m.step_s) * 100).toFixed(1)} %` });
      }
      console.log(table(rows));
    } finally {
      await run.close();
    }
  } finally {
    await cluster.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
