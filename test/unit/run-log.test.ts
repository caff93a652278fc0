/**
 * A detached run's event log (searchr1/run-log.ts) against an in-memory
 * object store with the cache's write semantics (put, patch appends, update
 * replaces the base and clears patches): the stored log stays bounded
 * however long the run, and a reader gets every event once, in order,
 * whether it reads after each event or after many.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ObjectCache } from "../../sdk/cache/object-cache.js";
import { LOG_KEEP, LOG_REBASE, LoopLogReader, LoopLogWriter, loopEventsKey } from "../../sdk/rl/state/run-log.js";

/** The cache's write semantics, in memory: a base and its patches per key. */
function memoryCache(): { cache: ObjectCache; stored: (key: string) => unknown[] } {
  const objects = new Map<string, { base: unknown[]; patches: unknown[][] }>();
  const cache = {
    async put(value: unknown[], opts: { key: string }) {
      objects.set(opts.key, { base: value, patches: [] });
    },
    async update(key: string, value: unknown[]) {
      objects.set(key, { base: value, patches: [] });
    },
    async patch(key: string, delta: unknown[]) {
      objects.get(key)!.patches.push(delta);
    },
    async get(key: string) {
      const o = objects.get(key)!;
      return [...o.base, ...o.patches.flat()];
    },
    async delete(prefix: string) {
      for (const k of objects.keys()) if (k.startsWith(prefix)) objects.delete(k);
      return 0;
    },
  } as unknown as ObjectCache;
  return { cache, stored: (key) => [...objects.get(key)!.base, ...objects.get(key)!.patches.flat()] };
}

test("the log stays bounded and a reader sees every event once, in order", async () => {
  const { cache, stored } = memoryCache();
  const writer = new LoopLogWriter(cache, "r");
  await writer.open();
  const often = new LoopLogReader(cache, "r");
  const seen: number[] = [];
  let largest = 0;
  for (let i = 1; i <= 5 * (LOG_KEEP + LOG_REBASE); i++) {
    writer.append({ type: "log", text: `line ${i}` });
    if (i % 50 === 0) {
      await writer.flush();
      for (const e of await often.next()) seen.push(e.seq);
      largest = Math.max(largest, stored(loopEventsKey("r")).length);
    }
  }
  await writer.flush();
  for (const e of await often.next()) seen.push(e.seq);
  const total = 5 * (LOG_KEEP + LOG_REBASE);
  assert.deepEqual(seen, Array.from({ length: total }, (_, i) => i + 1), "every event once, in order");
  assert.ok(largest <= LOG_KEEP + LOG_REBASE, `the stored log held ${largest} events at most`);
  // A reader that comes late gets the last events the log keeps, in order, with no gap among them.
  const late = (await new LoopLogReader(cache, "r").next()).map((e) => e.seq);
  assert.ok(late.length >= LOG_KEEP && late.length <= LOG_KEEP + LOG_REBASE);
  assert.deepEqual(late, Array.from({ length: late.length }, (_, i) => total - late.length + i + 1));
});
