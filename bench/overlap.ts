/**
 * `npm run bench -- overlap [steps-per-phase]`: overlapped rollouts and
 * training (`maxLag`) on the real runtime and driver — a head, an agent, 14
 * rollout executors and a gang of 2 trainers, SearchR1Run's step pipeline,
 * weight publication and sync through the cache — with a simulated engine
 * whose latency is fixed per token (bench/overlap-services.ts), set to the
 * reference's proportions scaled down 10× (rollout phase 14.3 s → ~1.43 s,
 * update 9.5 s → ~0.95 s). One run, warm executors; the lag changes
 * between phases K = 0, 1, 2, then 0 again (a drift check), and the first
 * steps of each phase are left out. Prints step time, steps/s, utilisation
 * and the ratio of steps/s against K = 0 measured in the same run (goal at
 * K = 1: ≥ 1.6×).
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { SearchR1Run } from "../sdk/envs/searchr1/run.js";
import { type StepMetrics } from "../sdk/rl/run/run.js";
import { startCluster } from "../test/helpers/cluster.js";
import { SIM_LATENCY } from "./overlap-services.js";
import { table } from "./stats.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROLLOUTS = 14;
const TRAINERS = 2;

/** A reward that varies within every group (the simulated engine writes random words). */
const lengthParity = (response: string): number => (response.length % 2 === 0 ? 1 : 0);

interface Phase {
  k: number;
  steps: StepMetrics[];
}

function mean(xs: number[]): number {
  return xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

/** Runs the phases and prints the table. */
export async function benchOverlap(args: string[]): Promise<void> {
  const perPhase = Number(args[0] ?? 8);
  const skip = 2;
  if (!Number.isInteger(perPhase) || perPhase <= skip) throw new Error(`steps per phase must be a whole number > ${skip}; got ${args[0]}`);
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-bench-overlap-"));
  process.env.HEARTH_HOME = path.join(work, "home");
  const load0 = os.loadavg();
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 16, mem: "16g" }] });
  const phases: Phase[] = [];
  try {
    const run = await SearchR1Run.create({
      head: cluster.endpoint,
      name: "bench-overlap",
      out: path.join(work, "out"),
      rollouts: ROLLOUTS,
      trainers: TRAINERS,
      promptsPerStep: 28,
      promptsPerTask: 2,
      groupSize: 8,
      maxTurnTokens: 128,
      evalEvery: 0,
      evalSize: 8,
      bootstrapSteps: 0,
      rolloutResreq: "cpu=0.5",
      trainerResreq: "cpu=0.5",
      checkpoint: false,
      log: () => undefined,
      serviceModules: {
        rollout: { module: path.join(HERE, "overlap-services.js"), export: "SimRollout" },
        trainer: { module: path.join(HERE, "overlap-services.js"), export: "SimTrainer" },
      },
    });
    run.setReward(lengthParity);
    try {
      for (const k of [0, 1, 2, 0]) {
        run.maxLag = k;
        const steps: StepMetrics[] = [];
        for (let i = 0; i < perPhase; i++) {
          const m = (await run.step()).metrics;
          if (i >= skip) steps.push(m);
        }
        phases.push({ k, steps });
        console.log(`# K=${k}: ${steps.map((m) => m.step_s.toFixed(2)).join(" ")} s per step`);
      }
    } finally {
      await run.close();
    }
  } finally {
    await cluster.stop();
    rmSync(work, { recursive: true, force: true });
  }
  const load1 = os.loadavg();
  const stepsPerSec = (p: Phase) => p.steps.length / p.steps.reduce((a, m) => a + m.step_s, 0);
  const base = mean(phases.filter((p) => p.k === 0).map(stepsPerSec));
  const rows = phases.map((p, i) => ({
    phase: `${i + 1}: K=${p.k}`,
    steps: p.steps.length,
    "step s": mean(p.steps.map((m) => m.step_s)).toFixed(3),
    "rollout wait s": mean(p.steps.map((m) => m.rollout_s)).toFixed(3),
    "update s": mean(p.steps.map((m) => m.update_s)).toFixed(3),
    "steps/s": stepsPerSec(p).toFixed(3),
    "rollout util": mean(p.steps.map((m) => m.rollout_util ?? NaN)).toFixed(2),
    "trainer util": mean(p.steps.map((m) => m.trainer_util ?? NaN)).toFixed(2),
    "lag max": Math.max(...p.steps.map((m) => m.policy_lag_max ?? NaN)),
    "lag mean": mean(p.steps.map((m) => m.policy_lag_mean ?? NaN)).toFixed(2),
    stale: p.steps.reduce((a, m) => a + (m.stale_dropped ?? 0), 0),
    "vs K=0": (stepsPerSec(p) / base).toFixed(2),
  }));
  console.log(`overlap: ${ROLLOUTS} rollout executors, a gang of ${TRAINERS} trainers, simulated engine ` +
    `(${SIM_LATENCY.rolloutMsPerToken} ms per decode step, ${SIM_LATENCY.trainMsPerToken} ms per trained token); ` +
    `28 prompts × 8 samples per step; ${perPhase} steps per phase, first ${skip} left out`);
  console.log(table(rows));
  const k1 = phases.find((p) => p.k === 1)!;
  const ratio = stepsPerSec(k1) / base;
  console.log(`K=1 vs K=0 steps/s: ${ratio.toFixed(2)}× (goal ≥ 1.6×; the ideal here is (rollout + update) / rollout)`);
  console.log(`load average before ${load0.map((x) => x.toFixed(2)).join(" ")}, after ${load1.map((x) => x.toFixed(2)).join(" ")} (2-core machine: above ~2 means other work shared it)`);
}
