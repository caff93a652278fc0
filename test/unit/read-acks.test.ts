/**
 * The SDK's side of the read credit (sdk/cache/transfer.ts): the token of
 * each object reply it read goes back on its next request; a request that
 * fails owes its tokens again, so a lost request never leaves the
 * connection charged for data that was read.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { download } from "../../sdk/cache/transfer.js";
import type { Reply, Requester } from "../../sdk/wire/requests.js";

test("a read's token rides the next request; a failed request's tokens ride the one after", async () => {
  const sent: Array<{ op: string; acks?: number[] }> = [];
  let failNext = false;
  let token = 100;
  const req: Requester = {
    request<T>(op: string, fields: Record<string, unknown> = {}): Promise<Reply<T>> {
      sent.push({ op, acks: fields.acks as number[] | undefined });
      if (failNext) {
        failNext = false;
        return Promise.reject(new Error("the head went away"));
      }
      const value = { mode: "full", version: 1, baseVersion: 1, parts: [{ kind: "bytes", size: 3, version: 1 }], ack: ++token };
      return Promise.resolve({ value: value as T, frames: [Buffer.from("abc")] });
    },
  };
  await download(req, { key: "a" });
  failNext = true;
  await assert.rejects(download(req, { key: "b" }), /went away/);
  await download(req, { key: "c" });
  assert.deepEqual(sent.slice(0, 2).map((s) => [s.op, s.acks]), [
    ["obj-get", undefined],
    ["obj-get", [101]],
  ]);
  // Owed again: on the next request, or in an obj-ack if 20 ms pass first.
  assert.deepEqual(sent[2]!.acks, [101], `the failed request's token goes back once more (${sent[2]!.op})`);
  assert.equal(sent.filter((s) => s.acks?.includes(101)).length, 2, "and only once more");
});
