/**
 * `hearth demo`: the main job on the embedded default — Search-R1 training of
 * the tiny model on the synthetic task (bootstrap if needed, 2 rollout
 * executors, 2 trainers over gloo, evaluation every few steps, metrics and an
 * HTML report in ./out). `hearth demo runtime` shows the runtime alone: a
 * warm pool that grows under load and stays warm for the next driver.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { connect } from "../sdk/connect.js";
import { formatStatus } from "./format-status.js";
import type { WarmIndex } from "./demo-service.js";
import { HearthError } from "../sdk/errors/index.js";
import { runTrainCommand } from "../sdk/rl/cli/train-cli.js";
import { WORKLOADS } from "../sdk/envs/registry.js";

/** Runs the demo; returns the process exit code. `--env NAME` picks the environment (default search-r1); other flags go to `train NAME`. */
export async function runDemo(args: string[]): Promise<number> {
  if (args[0] === "runtime") return runRuntimeDemo();
  const at = args.findIndex((a) => a === "--env" || a.startsWith("--env="));
  let env = "search-r1";
  const rest = [...args];
  if (at >= 0) {
    const a = args[at]!;
    const value = a.includes("=") ? a.slice(a.indexOf("=") + 1) : args[at + 1];
    if (!value) throw new HearthError(`--env needs an environment: ${Object.keys(WORKLOADS).join(", ")}`);
    env = value;
    rest.splice(at, a.includes("=") ? 1 : 2);
  }
  // With --agent the demo trains that agent on the environment's agent task (default the calculator's).
  if (rest.some((a) => a === "--agent" || a.startsWith("--agent="))) env = agentTaskOf(at >= 0 ? env : undefined);
  return runTrainCommand([env, ...rest], WORKLOADS);
}

/** The agent task of `--env` (default the calculator's): agent-calculator for calculator, agent-chain for search-r1. */
function agentTaskOf(env: string | undefined): string {
  const named = env === undefined ? "agent-calculator" : env.startsWith("agent-") ? env : env === "search-r1" || env === "searchr1" ? "agent-chain" : `agent-${env}`;
  if (!(named in WORKLOADS)) throw new HearthError(`--env ${env}: no agent task for it; with --agent use --env ${Object.keys(WORKLOADS).filter((w) => w.startsWith("agent-")).join(" or ")}`);
  return named;
}

async function runRuntimeDemo(): Promise<number> {
  const t0 = Date.now();
  console.log("connecting to the embedded default (starting a local head and agent if needed)…");
  const app = await connect({ name: "hearth-demo" });
  console.log(`connected to ${app.endpoint}${app.reattached ? " (reattached: executors still warm)" : ""} in ${Date.now() - t0} ms`);
  const module = path.join(path.dirname(fileURLToPath(import.meta.url)), "demo-service.js");
  const pool = await app.service<WarmIndex>({ module, export: "WarmIndex" }, { resreq: "cpu=0.25", warmup: 1, max: 4, idleTimeout: 5000 });
  console.log(`pool '${pool.name}' ready`);
  const first = await pool.call("search", "warm");
  console.log(`search("warm") → ${JSON.stringify(first.hits)} from ${first.executor}`);
  const t1 = Date.now();
  const queries = Array.from({ length: 40 }, (_, i) => [["gang", "pool grows", "tokens", "reference"][i % 4]!, 100] as [string, number]);
  const executors = new Set<string>();
  let answered = 0;
  for await (const r of pool.map("search", queries, { window: 40 })) {
    executors.add(r.executor);
    answered++;
  }
  console.log(`40 calls of 100 ms answered in ${Date.now() - t1} ms by ${executors.size} executor(s): the pool grew under load`);
  console.log(`\n${formatStatus(await app.status())}\n`);
  await app.disconnect();
  console.log(`done (${answered} answers); the app stays warm for its keep-alive period. \`npm run hearth -- down\` stops the local cluster.`);
  return 0;
}
