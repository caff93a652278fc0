/**
 * `npm run bench -- agent [rounds]`: the agent endpoint against the
 * environment path, in one run on one cluster: the calculator agent task,
 * its shipped policy, the same items, seeds, group size and executors. Each
 * round rolls a step's items out three ways, one after the other: on the
 * environment path (the task's tool-call environment, the engine's own
 * loop), and through the endpoint with an agent written with the official
 * `openai` SDK and one written with the Vercel AI SDK, each run warm in the
 * rollout executors. Prints generated tokens per second of each (sampled
 * tokens over the call's wall time), their ratio to the environment path's
 * (goal ≥ 0.7×), and the endpoint's own time per request (p50, p99: reading,
 * rendering, tokenising, parsing and answering, apart from waiting for and
 * running batches), per executor. The first round is left out (warm-up).
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { agentCalculator } from "../sdk/envs/agent/package.js";
import { AgentRun } from "../sdk/rl/run/run.js";
import type { Rollouts } from "../sdk/rl/run/run.js";
import type { Trajectory } from "../sdk/rl/types.js";
import { startCluster } from "../test/helpers/cluster.js";
import { table } from "./stats.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const AGENTS = {
  openai: `${path.resolve(HERE, "../examples/agents/calc-openai.js")}#solve`,
  "ai sdk": `${path.resolve(HERE, "../examples/agents/calc-ai-sdk.js")}#solve`,
};

interface Sample {
  path: string;
  seconds: number;
  sampled: number;
  tokens: number;
  calls: number;
  episodes: number;
}

/** Sampled (mask 1) tokens and tool calls of a batch's trajectories. */
async function counts(run: AgentRun, batch: Rollouts): Promise<{ sampled: number; tokens: number; calls: number; episodes: number }> {
  let sampled = 0;
  let tokens = 0;
  let calls = 0;
  let episodes = 0;
  for (const p of batch.parts) {
    for (const t of await run.app.objects.get<Trajectory[]>(p.r.trajectories)) {
      for (const m of t.mask) sampled += m;
      tokens += t.tokens.length;
      calls += t.calls.length;
      if ((t.episode?.sequence ?? 0) === 0) episodes++;
    }
  }
  await run.app.objects.delete(batch.keys);
  return { sampled, tokens, calls, episodes };
}

/** Runs the rounds and prints the table. */
export async function benchAgent(args: string[]): Promise<void> {
  const rounds = Number(args[0] ?? 4);
  if (!Number.isInteger(rounds) || rounds < 2) throw new Error(`rounds must be a whole number ≥ 2; got ${args[0]}`);
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-bench-agent-"));
  process.env.HEARTH_HOME = path.join(work, "home");
  const load0 = os.loadavg();
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
  const samples: Sample[] = [];
  let timings: Array<{ executorId: string; timings: unknown }> = [];
  try {
    const run = await AgentRun.create({ head: cluster.endpoint, name: "bench-agent", out: path.join(work, "out"), evalEvery: 0, evalSize: 8, checkpoint: false, log: () => undefined }, agentCalculator);
    try {
      for (let round = 0; round < rounds; round++) {
        const items = run.itemsOf(round + 1);
        const paths: Array<[string, string | undefined]> = [["environment", undefined], ...Object.entries(AGENTS)];
        for (const [name, agent] of paths) {
          if (name === "openai" && round === rounds - 1) await run.rolloutPool.broadcastMembers("endpointTimings", true);
          const t0 = performance.now();
          const batch = await run.rollout(items, { step: round + 1, ...(agent ? { agent } : {}) });
          const seconds = (performance.now() - t0) / 1000;
          const c = await counts(run, batch);
          if (round > 0) samples.push({ path: name, seconds, ...c });
          if (name === "openai" && round === rounds - 1) timings = (await run.rolloutPool.broadcastMembers("endpointTimings", false)).map((m) => m.result);
        }
        console.log(`# round ${round + 1}: ${samples.filter((s) => s.seconds > 0).slice(-3).map((s) => `${s.path} ${(s.sampled / s.seconds).toFixed(0)} tok/s`).join(", ")}`);
      }
    } finally {
      await run.close();
    }
  } finally {
    await cluster.stop();
    rmSync(work, { recursive: true, force: true });
  }
  const load1 = os.loadavg();
  const rate = (p: string): number => {
    const xs = samples.filter((s) => s.path === p);
    return xs.reduce((n, s) => n + s.sampled, 0) / xs.reduce((n, s) => n + s.seconds, 0);
  };
  const base = rate("environment");
  const rows = ["environment", ...Object.keys(AGENTS)].map((p) => {
    const xs = samples.filter((s) => s.path === p);
    return {
      path: p,
      rounds: xs.length,
      "s per rollout": (xs.reduce((n, s) => n + s.seconds, 0) / xs.length).toFixed(2),
      "sampled tokens": Math.round(xs.reduce((n, s) => n + s.sampled, 0) / xs.length),
      "calls/sample": (xs.reduce((n, s) => n + s.calls, 0) / xs.reduce((n, s) => n + s.episodes, 0)).toFixed(2),
      "sampled tok/s": rate(p).toFixed(0),
      "vs environment": (rate(p) / base).toFixed(2),
    };
  });
  console.log(`agent endpoint vs environment path: the calculator agent task, its shipped policy, ${samples[0]?.episodes ?? "?"} episodes a rollout, 2 rollout executors, the same seeds`);
  console.log(table(rows));
  console.log(`goal: the agent path's sampled tokens per second ≥ 0.7× the environment path's (openai agent: ${(rate("openai") / base).toFixed(2)}×)`);
  for (const t of timings) {
    const s = t.timings as { n: number; overhead: { p50: number; p99: number }; queued: { p50: number; p99: number }; engine: { p50: number; p99: number } } | null;
    if (s) console.log(`endpoint on ${t.executorId} (last round, openai agent, ${s.n} requests): own overhead p50 ${s.overhead.p50.toFixed(2)} ms, p99 ${s.overhead.p99.toFixed(2)} ms; waiting for a batch p50 ${s.queued.p50.toFixed(1)} ms; the batch p50 ${s.engine.p50.toFixed(1)} ms`);
  }
  console.log(`load average before ${load0.map((x) => x.toFixed(2)).join(" ")}, after ${load1.map((x) => x.toFixed(2)).join(" ")} (2-core machine: above ~2 means other work shared it)`);
}
