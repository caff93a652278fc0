/**
 * Who may join the head, and as what. Each peer proves a key derived from the
 * cluster secret for one role and identity (sdk/wire/auth.ts); the head
 * dispatches on that proven role, never on the shape of a routing id:
 *
 * - admin: any app as a driver, plus `shutdown` and status of every app;
 * - driver: the one app its credential names (hello, calls, objects, status);
 * - agent: registers, heartbeats, reserves ports, and reports the start
 *   failures and exits of the executors the head placed on it, nothing else;
 * - executor: answers the calls routed to it and reads its own app's objects;
 *   its key names its app and id, so it cannot pose as another executor.
 */
import { deriveKey, type Role } from "../../sdk/wire/auth.js";

/** The key a peer claiming (role, id, app) must prove at the head, or why it may not join. */
export function peerKey(secret: Buffer, role: Role, id: string, app: string): Buffer | string {
  switch (role) {
    case "admin":
      return app === "" ? deriveKey(secret, "admin", id, "") : "an admin credential names no app";
    case "driver":
      return app !== "" && id === app ? deriveKey(secret, "driver", id, app) : "a driver credential names one app (its id and app are the app's name)";
    case "agent":
      return app === "" ? deriveKey(secret, "agent", id, "") : "an agent credential names no app";
    case "executor":
      return app !== "" ? deriveKey(secret, "executor", id, app) : "an executor credential names its app";
  }
}

/** How many proven connections the head holds (the `hearth head` flags in brackets). */
export interface PeerLimits {
  /** All proven connections together (`--max-peers`). */
  maxPeers: number;
  /** Proven driver connections of one app (`--max-drivers-per-app`). */
  maxDriversPerApp: number;
  /** Proven agent connections (`--max-agents`). */
  maxAgents: number;
}

/** The defaults of PeerLimits: far above what one cluster needs, low enough to bound the head's memory. */
export const PEER_LIMITS: PeerLimits = { maxPeers: 16_384, maxDriversPerApp: 64, maxAgents: 1024 };

/**
 * Every peer heartbeats each second; a binding silent this long does not count
 * towards a limit and is dropped when a limit is reached (if its peer is alive
 * it re-proves itself transparently on its next message).
 */
export const STALE_BINDING_MS = 15_000;

/**
 * Whether a newly proven peer may be bound, given the current bindings: a
 * reason naming the limit and its flag, or undefined. Stale bindings are
 * dropped from `bound` first, so peers that left without a word (a killed
 * driver) never hold a slot for long.
 */
export function admitPeer(limits: PeerLimits, candidate: { role: Role; app: string }, bound: Map<string, { role: Role; app: string; lastSeen: number }>, now = Date.now()): string | undefined {
  const count = (): { all: number; drivers: number; agents: number } => {
    let all = 0;
    let drivers = 0;
    let agents = 0;
    for (const p of bound.values()) {
      all++;
      if (p.role === "driver" && p.app === candidate.app) drivers++;
      if (p.role === "agent") agents++;
    }
    return { all, drivers, agents };
  };
  const over = (c: { all: number; drivers: number; agents: number }): string | undefined => {
    if (c.all >= limits.maxPeers) return `the head holds its maximum of ${limits.maxPeers} connections (hearth head --max-peers)`;
    if (candidate.role === "driver" && c.drivers >= limits.maxDriversPerApp) {
      return `app '${candidate.app}' already has its maximum of ${limits.maxDriversPerApp} driver connections (hearth head --max-drivers-per-app)`;
    }
    if (candidate.role === "agent" && c.agents >= limits.maxAgents) return `the head holds its maximum of ${limits.maxAgents} agents (hearth head --max-agents)`;
    return undefined;
  };
  if (over(count()) === undefined) return undefined;
  for (const [k, p] of bound) if (now - p.lastSeen > STALE_BINDING_MS) bound.delete(k);
  return over(count());
}
