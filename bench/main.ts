/**
 * `npm run bench -- <name> [args]`: runs one benchmark. Benchmarks print
 * ratios against a peer measured in the same run; they never fail on noise.
 */
import { benchAgent } from "./agent.js";
import { benchBm25 } from "./bm25.js";
import { benchCache } from "./cache.js";
import { benchDistribution } from "./distribution.js";
import { benchOverlap } from "./overlap.js";
import { benchReplay } from "./replay.js";
import { benchRpc } from "./rpc.js";
import { benchSnapshot } from "./snapshot.js";
import { benchSoak } from "./soak.js";
import { benchWeights } from "./weights.js";

const benches: Record<string, (args: string[]) => Promise<unknown>> = {
  rpc: benchRpc,
  cache: benchCache,
  bm25: benchBm25,
  overlap: benchOverlap,
  soak: benchSoak,
  snapshot: benchSnapshot,
  weights: benchWeights,
  distribution: benchDistribution,
  agent: benchAgent,
  replay: benchReplay,
};

const [name, ...args] = process.argv.slice(2);
const bench = name ? benches[name] : undefined;
if (!bench) {
  console.error(`usage: npm run bench -- <${Object.keys(benches).join("|")}> [args]`);
  process.exit(2);
}
await bench(args);
process.exit(0);
