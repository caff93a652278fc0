/**
 * Replacing an object while a reader is still pulling the old version's chunks
 * (a node cache fetching a 64 MiB object, say): the reader's parts keep their
 * bytes, so it finishes the version it started; the store's memory accounting
 * counts only the new version.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ObjectStore } from "../../cluster-agent/head/object-store.js";

test("a replaced version stays readable for a reader that holds it; memory counts the new one", async () => {
  const store = new ObjectStore({ memLimit: 1 << 20 });
  await store.write("put", "app/w", { kind: "bytes", data: Buffer.alloc(1000, 1) });
  const inFlight = store.read("app/w");
  assert.ok(inFlight.mode === "full");
  await store.write("update", "app/w", { kind: "bytes", data: Buffer.alloc(600, 2) });
  const part = inFlight.parts[0]!;
  assert.ok(part.data, "the old version's bytes are still there for the reader that holds them");
  assert.equal(part.data.subarray(0, 8).toString("hex"), "0101010101010101");
  assert.equal(store.usage().memUsed, 600);
  const now = store.read("app/w");
  assert.ok(now.mode === "full" && now.parts[0]!.data!.equals(Buffer.alloc(600, 2)));
});
