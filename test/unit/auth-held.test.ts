/**
 * What an Authenticator holds for peers that have not proven a credential:
 * the bytes of all of them together are bounded (AUTH_LIMITS.heldBytesTotal),
 * and a dropped peer's bytes are given back.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { Authenticator } from "../../sdk/wire/authenticator.js";

test("held bytes of all unproven peers together stay under heldBytesTotal; a dropped peer frees its share", () => {
  const sent: string[] = [];
  const auth = new Authenticator({
    name: "test",
    keyFor: () => "no one is admitted here",
    send: (id) => sent.push(id.toString()),
    deliver: () => assert.fail("nothing unproven is delivered"),
    log: () => {},
    limits: { heldBytesTotal: 100, waitingPeers: 2 },
  });
  const msg = [Buffer.alloc(60)];
  auth.receive(Buffer.from("p1"), msg);
  auth.receive(Buffer.from("p2"), msg);
  assert.equal(auth.stats.dropped, 1, "p2's 60 bytes would make 120 > 100: dropped");
  assert.deepEqual(sent, ["p1", "p2"], "each unproven peer got its challenge");
  // A third peer evicts the oldest (waitingPeers 2): p1's 60 bytes are given back and p3's fit.
  auth.receive(Buffer.from("p3"), msg);
  assert.equal(auth.stats.dropped, 2, "p1's held message was dropped with it");
  auth.receive(Buffer.from("p3"), [Buffer.alloc(50)]);
  assert.equal(auth.stats.dropped, 3, "60 + 50 > 100: the total counts p3's own bytes too");
});
