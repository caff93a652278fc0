/**
 * A node copying from a peer that dies asks the next source (another peer,
 * or the head) only for the chunks it does not have: a chunk the dead peer
 * delivered that is still being written counts as had, so the head never
 * sends it again (test/chaos/kill-transfer.test.ts counts the head's bytes
 * on a real cluster; this pins the one case its timing rarely hits).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { ReceivingPart } from "../../cluster-agent/receiving.js";
import { chunkSum } from "../../sdk/cache/file-io.js";
import { CHUNK } from "../../sdk/cache/transfer.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-receiving-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("a chunk still being written when its source fails is not asked of the next source, and is counted once", async () => {
  const chunks = [randomBytes(CHUNK), randomBytes(CHUNK)];
  const part = new ReceivingPart({ kind: "bytes", size: 2 * CHUNK, version: 1, sums: chunks.map(chunkSum) }, path.join(dir, "part"), 0o600, { key: "k", app: "a" });
  const fromPeer = { bytes: 0 };
  const fromHead = { bytes: 0 };
  // The peer's chunk 0 arrived and its write is under way when the peer dies: the head's job list is made now.
  const writing = part.write(chunks[0]!, 0, fromPeer);
  const askHead = [0, CHUNK].filter((offset) => !part.holds(offset));
  assert.deepEqual(askHead, [CHUNK], "only the chunk that never came is asked of the head");
  // Were the head to send chunk 0 too, it would be written once, by whichever came first (not counted twice).
  await Promise.all([writing, part.write(chunks[0]!, 0, fromHead), part.write(chunks[1]!, CHUNK, fromHead)]);
  part.end();
  assert.deepEqual([fromPeer.bytes, fromHead.bytes], [CHUNK, CHUNK]);
  part.done(false);
});
