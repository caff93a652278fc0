/**
 * Placement: where executors go. Pure functions over agents' free resources,
 * so the gang rule (all members or none) is easy to test and to read.
 */
import type { Resources } from "../../sdk/runtime/resreq.js";
import { fits } from "../../sdk/runtime/resreq.js";

/** What an agent has free (or in total); GPUs are named slots. */
export interface Capacity {
  cpu: number;
  mem: number;
  gpus: string[];
}

/** An agent as the placer sees it. */
export interface PlacementAgent {
  id: string;
  free: Capacity;
  total: Capacity;
}

/** The agent label that reserves an agent for one service (set by engines that start agents per service). */
export const SERVICE_LABEL = "hearth.service";

/**
 * May this agent host executors of this service? An agent labelled
 * `hearth.service=<id>` (started by a Slurm job for that service) hosts only
 * that service; an elastic service runs only on agents labelled for it.
 */
export function agentAccepts(labels: Record<string, string>, service: { id: string; elastic: boolean }): boolean {
  const owner = labels[SERVICE_LABEL];
  return owner === undefined ? !service.elastic : owner === service.id;
}

/** One executor's slot: which agent, which GPU slots. */
export interface Placement {
  agentId: string;
  gpus: string[];
}

function asResources(c: Capacity): Resources {
  return { cpu: c.cpu, mem: c.mem, gpu: c.gpus.length };
}

/** Could any single agent ever host one executor of this size (ignoring current load)? */
export function everFitsOne(agents: Iterable<PlacementAgent>, need: Resources): boolean {
  for (const a of agents) if (fits(need, asResources(a.total))) return true;
  return false;
}

/** Could `n` executors of this size ever run at once on these agents (ignoring current load)? */
export function everFitsGang(agents: PlacementAgent[], need: Resources, n: number): boolean {
  return placeMany(agents.map((a) => ({ id: a.id, free: cloneCapacity(a.total), total: a.total })), need, n) !== null;
}

/** Chooses a slot for one executor: the agent with the most free CPU that fits. Does not reserve. */
export function placeOne(agents: Iterable<PlacementAgent>, need: Resources): Placement | null {
  let best: PlacementAgent | null = null;
  for (const a of agents) {
    if (!fits(need, asResources(a.free))) continue;
    if (best === null || a.free.cpu > best.free.cpu) best = a;
  }
  if (best === null) return null;
  return { agentId: best.id, gpus: best.free.gpus.slice(0, need.gpu) };
}

/**
 * Places `n` executors together or returns null: never a partial answer.
 * Works on a scratch copy of the free capacities, so nothing is reserved.
 */
export function placeMany(agents: PlacementAgent[], need: Resources, n: number): Placement[] | null {
  const scratch = agents.map((a) => ({ id: a.id, free: cloneCapacity(a.free), total: a.total }));
  const out: Placement[] = [];
  for (let i = 0; i < n; i++) {
    const p = placeOne(scratch, need);
    if (p === null) return null;
    const a = scratch.find((s) => s.id === p.agentId)!;
    take(a.free, need, p.gpus);
    out.push(p);
  }
  return out;
}

/** Subtracts an executor's share from an agent's free capacity. */
export function take(free: Capacity, need: Resources, gpus: string[]): void {
  free.cpu -= need.cpu;
  free.mem -= need.mem;
  free.gpus = free.gpus.filter((g) => !gpus.includes(g));
}

/** Returns an executor's share to an agent's free capacity. */
export function give(free: Capacity, need: Resources, gpus: string[], total: Capacity): void {
  free.cpu = Math.min(total.cpu, free.cpu + need.cpu);
  free.mem = Math.min(total.mem, free.mem + need.mem);
  const back = new Set([...free.gpus, ...gpus]);
  free.gpus = total.gpus.filter((g) => back.has(g));
}

export function cloneCapacity(c: Capacity): Capacity {
  return { cpu: c.cpu, mem: c.mem, gpus: [...c.gpus] };
}
