/**
 * The head's admission rule for proven peers (cluster-agent/head/peer-roles.ts):
 * limits count live bindings only, and bindings silent past STALE_BINDING_MS
 * are dropped when a limit is reached, so a peer killed without a word does
 * not hold its slot.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { PEER_LIMITS, STALE_BINDING_MS, admitPeer } from "../../cluster-agent/head/peer-roles.js";
import type { Role } from "../../sdk/wire/auth.js";

type Bound = Map<string, { role: Role; app: string; lastSeen: number }>;

test("a driver beyond the per-app limit is refused while the others are live, and admitted once one went silent", () => {
  const now = 1_000_000;
  const limits = { ...PEER_LIMITS, maxDriversPerApp: 2 };
  const bound: Bound = new Map([
    ["a", { role: "driver", app: "x", lastSeen: now - 1000 }],
    ["b", { role: "driver", app: "x", lastSeen: now - 2000 }],
    ["c", { role: "driver", app: "y", lastSeen: now }],
  ]);
  assert.match(String(admitPeer(limits, { role: "driver", app: "x" }, bound, now)), /maximum of 2 driver connections \(hearth head --max-drivers-per-app\)/);
  assert.equal(bound.size, 3, "live bindings are kept");
  assert.equal(admitPeer(limits, { role: "driver", app: "y" }, bound, now), undefined, "another app has its own count");
  bound.get("b")!.lastSeen = now - STALE_BINDING_MS - 1;
  assert.equal(admitPeer(limits, { role: "driver", app: "x" }, bound, now), undefined);
  assert.ok(!bound.has("b"), "the silent binding was dropped to make room");
});

test("total and agent limits count every role; nothing is dropped while no limit is reached", () => {
  const now = 5_000_000;
  const old = now - STALE_BINDING_MS - 1;
  const bound: Bound = new Map([
    ["e", { role: "executor", app: "x", lastSeen: old }],
    ["g", { role: "agent", app: "", lastSeen: now }],
  ]);
  assert.equal(admitPeer({ ...PEER_LIMITS, maxPeers: 3 }, { role: "admin", app: "" }, bound, now), undefined);
  assert.ok(bound.has("e"), "a silent binding stays while there is room");
  assert.match(String(admitPeer({ ...PEER_LIMITS, maxAgents: 1 }, { role: "agent", app: "" }, bound, now)), /maximum of 1 agents \(hearth head --max-agents\)/);
  assert.match(String(admitPeer({ ...PEER_LIMITS, maxPeers: 1 }, { role: "admin", app: "" }, new Map([["g", bound.get("g")!]]), now)), /maximum of 1 connections \(hearth head --max-peers\)/);
  assert.equal(admitPeer({ ...PEER_LIMITS, maxPeers: 2 }, { role: "admin", app: "" }, bound, now), undefined, "the silent executor binding made room");
  assert.ok(!bound.has("e"));
});
