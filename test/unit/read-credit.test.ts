/**
 * The read credit (cluster-agent/read-credit.ts): a connection holds at most
 * its limit of object data it has not acknowledged; past it replies wait, in
 * order, until tokens come back (from any connection: holding one is the
 * proof); a forged or repeated token frees nothing; a reply that waits too
 * long, or one too many waiting, fails with BackpressureError.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ReadCredit } from "../../cluster-agent/read-credit.js";
import { BackpressureError } from "../../sdk/errors/index.js";

const MiB = 1024 * 1024;

test("replies past the limit wait until tokens come back, in order; forged and repeated tokens free nothing", async () => {
  const credit = new ReadCredit({ limit: 32 * MiB });
  const tokens: number[] = [];
  for (let i = 0; i < 4; i++) tokens.push(await credit.admit("a", 8 * MiB));
  assert.equal(credit.unread("a"), 32 * MiB);
  const order: number[] = [];
  const later = [5, 6, 7].map((n) => credit.admit("a", 8 * MiB).then((t) => (order.push(n), t)));
  // Another connection is not held back by this one.
  await credit.admit("b", 8 * MiB);
  credit.acknowledge("a", [123456789, tokens[0]! + 1, "x", null]);
  await Promise.resolve();
  assert.deepEqual(order, [], "made-up tokens free nothing");
  credit.acknowledge("a", [tokens[0]!, tokens[0]!]);
  const t5 = await later[0]!;
  assert.deepEqual(order, [5], "one token back lets exactly one reply of that size go");
  assert.equal(credit.unread("a"), 32 * MiB, "a token counts once");
  // A token handed back on another connection of the same peer counts too (an agent's control and bulk sockets).
  credit.acknowledge("a-bulk", [tokens[1]!, tokens[2]!]);
  await Promise.all([later[1], later[2]]);
  assert.deepEqual(order, [5, 6, 7]);
  credit.acknowledge("a", [tokens[3]!, t5]);
  assert.equal(credit.unread("a"), 16 * MiB);
});

test("a connection holding nothing unread always gets one reply, however large", async () => {
  const credit = new ReadCredit({ limit: 1 * MiB });
  const t = await credit.admit("a", 64 * MiB);
  assert.equal(credit.unread("a"), 64 * MiB);
  credit.acknowledge("a", [t]);
  assert.equal(credit.unread("a"), 0);
});

test("a reply that waits past waitMs, or one beyond the waiting bound, fails with BackpressureError naming the unread bytes", async () => {
  const credit = new ReadCredit({ limit: 8 * MiB, waitMs: 50, waiting: 1 });
  await credit.admit("a", 8 * MiB);
  const waiting = credit.admit("a", 1 * MiB);
  await assert.rejects(credit.admit("a", 1 * MiB), (e: unknown) => e instanceof BackpressureError && e.unread === 8 * MiB && e.limit === 8 * MiB && /1 more replies already wait/.test(e.message));
  await assert.rejects(waiting, (e: unknown) => e instanceof BackpressureError && /has 8 MiB of object data it has not acknowledged reading \(limit 8 MiB\), and its reply waited 0.05 s/.test(e.message));
  assert.deepEqual(credit.stats, { waited: 1, refused: 2 });
});
