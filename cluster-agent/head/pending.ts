/**
 * Why a service waits: which service, how many of its executors are placed
 * of how many it wants, and what each agent that may host it has free (and
 * who holds the rest). The status document carries it (`pending` of each
 * service), drivers repeat it while `service()` waits for readiness, and the
 * ready deadline's TimeoutError names the same, so asking for more than the
 * cluster has is never silent.
 *
 * Another app's services are counted, never named: a driver of one app
 * learns nothing of another's but that it holds resources.
 */
import { formatBytes } from "../../sdk/format.js";
import { formatResources } from "../../sdk/runtime/resreq.js";
import { liveExecutors } from "./call-router.js";
import type { AgentRecord, ExecutorRecord, ServiceRecord } from "./records.js";

/** One agent as a pending explanation shows it. */
export interface PendingAgent {
  id: string;
  free: { cpu: number; mem: number; gpus: number };
  total: { cpu: number; mem: number; gpus: number };
  /** What runs there: this app's services by name with their executor counts, and other apps' executors counted. */
  holders: string;
}

/** Why a service is not fully placed. */
export interface PendingExplanation {
  service: string;
  kind: "pool" | "gang";
  /** Executors placed (starting or serving) and the number the service waits for. */
  placed: number;
  wanted: number;
  /** What one executor needs. */
  each: string;
  agents: PendingAgent[];
  /** All of the above in one sentence. */
  text: string;
}

/** What the explanation reads of the scheduler. */
export interface PendingSource {
  /** The agents that may host `s` (its labels allow it). */
  agentsFor(s: ServiceRecord): AgentRecord[];
  readonly executors: Map<string, ExecutorRecord>;
  readonly services: Map<string, ServiceRecord>;
}

/**
 * Explains a service that waits for placement (declared, not failed or
 * stopped, fewer executors placed than its warmup); undefined for one whose
 * executors are all placed, or that is recovering after a head restart.
 */
export function explainPending(src: PendingSource, s: ServiceRecord): PendingExplanation | undefined {
  if (s.state !== "pending" && s.state !== "starting") return undefined;
  if (s.recovering) return undefined;
  const placed = liveExecutors(s).length;
  const wanted = s.spec.warmup;
  if (placed >= wanted) return undefined;
  const agents = src.agentsFor(s).map((a) => describeAgent(src, a, s.app));
  const each = formatResources(s.spec.resources);
  const why = s.kind === "gang" ? "a gang is placed whole or not at all" : "no agent has room for another";
  const where =
    agents.length === 0
      ? s.spec.elastic
        ? "no agent for it has joined yet (its engine starts them)"
        : "no agent that may host it is registered"
      : agents.map((a) => `agent ${a.id} has cpu ${a.free.cpu} of ${a.total.cpu}, mem ${formatBytes(a.free.mem)} of ${formatBytes(a.total.mem)}, gpus ${a.free.gpus} of ${a.total.gpus} free${a.holders ? ` (held by ${a.holders})` : ""}`).join("; ");
  const text = `service '${s.spec.name}' (${s.kind}, ${each} each) is pending: ${placed} of ${wanted} executor(s) placed; ${why}. ${where}`;
  return { service: s.spec.name, kind: s.kind, placed, wanted, each, agents, text };
}

function describeAgent(src: PendingSource, a: AgentRecord, app: string): PendingAgent {
  const mine = new Map<string, number>();
  let others = 0;
  for (const id of a.executors) {
    const e = src.executors.get(id);
    const owner = e && src.services.get(e.serviceId);
    if (!owner) continue;
    if (owner.app === app) mine.set(owner.spec.name, (mine.get(owner.spec.name) ?? 0) + 1);
    else others++;
  }
  const holders = [...[...mine].map(([name, n]) => `'${name}' ×${n}`), ...(others > 0 ? [`${others} executor(s) of other apps`] : [])].join(", ");
  return {
    id: a.id,
    free: { cpu: a.free.cpu, mem: a.free.mem, gpus: a.free.gpus.length },
    total: { cpu: a.total.cpu, mem: a.total.mem, gpus: a.total.gpus.length },
    holders,
  };
}
