/**
 * A node cache's connections to other nodes' caches (which it copies bases
 * and pre-copied parts from): made on first use, closed when idle, and
 * failed at once when the peer's connection drops (a dead peer's copy is
 * left for the head without waiting on request deadlines).
 */
import { randomBytes } from "node:crypto";
import { DealerChannel } from "../sdk/wire/channel.js";
import { decodeHeader } from "../sdk/wire/codec.js";
import { HearthError } from "../sdk/errors/index.js";
import { PendingRequests } from "../sdk/wire/requests.js";
import { credentialFrom } from "../sdk/wire/auth.js";
import { curveClientFromEnv } from "../sdk/wire/curve.js";

/** A node the head named to copy from. */
export interface PeerHint {
  agentId: string;
  endpoint: string;
}

/** A connection to another node's cache. */
export interface PeerLink {
  channel: DealerChannel;
  requests: PendingRequests;
  lastUsed: number;
}

/**
 * How long one chunk from a peer may take: past it the peer is taken as hung
 * and the head is asked for another. A healthy peer passing on a copy it
 * receives has each chunk within a second or so; a dead one's connection
 * drops at once (onDisconnect), a hung one's does not.
 */
export const PEER_STALL_MS = 10_000;

/** Peers one copy tries before the head serves the rest. */
export const MAX_PEER_TRIES = 3;

/** How long a peer connection may sit unused before it is closed. */
const PEER_IDLE_MS = 60_000;

/** The peer connections of one node cache (agent `agentId`, signing with `secret`). */
export class PeerLinks {
  private readonly links = new Map<string, PeerLink>();

  constructor(
    private readonly agentId: string,
    private readonly secret: Buffer,
    private readonly log: (line: string) => void,
  ) {}

  /** The connection to another node's cache at `endpoint` (made on first use). */
  link(endpoint: string): PeerLink {
    const known = this.links.get(endpoint);
    if (known) {
      known.lastUsed = Date.now();
      return known;
    }
    const channel = new DealerChannel(`a.${this.agentId}.peer.${randomBytes(12).toString("hex")}`, {
      maxMessageSize: 64 * 1024 * 1024,
      onError: (err) => this.log(`peer socket error (${endpoint}): ${String(err)}`),
      curveClient: curveClientFromEnv(),
      auth: credentialFrom(this.secret, "agent", this.agentId),
      onAuthFailed: (err) => this.log(`the node cache at ${endpoint} refused this agent's credential: ${err.message}`),
    });
    const requests = new PendingRequests(channel, `node cache at ${endpoint}`);
    // A peer that died answers nothing: its copy is left for the head at once, not after request deadlines.
    channel.onDisconnect(() => requests.failAll(new HearthError(`the connection to the node cache at ${endpoint} dropped`)));
    channel.connect(endpoint);
    void channel.serve((frames) => void requests.deliver(decodeHeader(frames[0]), frames));
    const link = { channel, requests, lastUsed: Date.now() };
    this.links.set(endpoint, link);
    return link;
  }

  /** Closes connections unused for PEER_IDLE_MS with nothing in flight. */
  sweep(now: number): void {
    for (const [endpoint, link] of this.links) {
      if (now - link.lastUsed < PEER_IDLE_MS || link.requests.size > 0) continue;
      link.channel.close();
      this.links.delete(endpoint);
    }
  }

  /** Ends every connection (what waits on one fails). */
  close(): void {
    for (const link of this.links.values()) {
      link.requests.failAll(new HearthError("the node cache closed"));
      link.channel.close();
    }
    this.links.clear();
  }
}
