/**
 * The environment packages hearth ships, by the workload names of
 * `hearth train WORKLOAD` and `hearth demo --env NAME` (a package's own name
 * is accepted too).
 */
import type { Workloads } from "../rl/cli/train-cli.js";
import { searchR1 } from "./searchr1/package.js";

/** `hearth train search-r1` (alias `searchr1`). */
export const WORKLOADS: Workloads = { "search-r1": searchR1, searchr1: searchR1 };
