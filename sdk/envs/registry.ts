/**
 * The environment packages hearth ships, by the workload names of
 * `hearth train WORKLOAD` and `hearth demo --env NAME` (a package's own name
 * is accepted too).
 */
import type { Workloads } from "../rl/cli/train-cli.js";
import type { ShippedPolicy } from "../rl/run/warm-start.js";
import { CALC_POLICY } from "./calculator/recipe.js";
import { CHAIN_POLICY } from "./searchr1/recipes/chain.js";
import { calculator } from "./calculator/package.js";
import { AGENT_CALC_POLICY } from "./agent/recipes/calculator.js";
import { AGENT_CHAIN_POLICY } from "./agent/recipes/chain.js";
import { agentCalculator, agentChain } from "./agent/package.js";
import { searchR1 } from "./searchr1/package.js";

/** `hearth train search-r1` (alias `searchr1`), `hearth train calculator`, and the agent tasks on the environment path: `hearth train agent-calculator`, `hearth train agent-chain`. */
export const WORKLOADS: Workloads = { "search-r1": searchR1, searchr1: searchR1, calculator, "agent-calculator": agentCalculator, "agent-chain": agentChain };

/** The shipped starting policies `hearth warmstart --env NAME` (re)makes (default search-r1's). */
export const POLICIES: Readonly<Record<string, ShippedPolicy>> = {
  "search-r1": CHAIN_POLICY as ShippedPolicy,
  calculator: CALC_POLICY as ShippedPolicy,
  "agent-calculator": AGENT_CALC_POLICY as ShippedPolicy,
  "agent-chain": AGENT_CHAIN_POLICY as ShippedPolicy,
};
