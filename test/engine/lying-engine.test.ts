/**
 * A real engine process whose replies lie about their sizes: a stand-in
 * `hearth_engine` (plain Python, no torch) spoken to through TensorEngine.
 * A reply announcing a 1 TB payload, or a negative one, fails its request
 * at once with EngineError `protocol` naming the size — not a wait until
 * the deadline, and never a frame decoded from the wrong bytes — and the
 * link kills the process, whose stream can no longer be trusted.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { EngineError, TensorEngine } from "../../sdk/tensor/index.js";
import { waitFor } from "../helpers/cluster.js";

/** Answers ping; `huge` and `negative` with a lying frame; `bad_ref` with a tensor reference past its payloads. */
const LIAR = String.raw`
import json, struct, sys

def read():
    head = sys.stdin.buffer.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    header = json.loads(sys.stdin.buffer.read(n))
    for size in header.get("sizes", []):
        sys.stdin.buffer.read(size)
    return header

def write(header, raw=b""):
    body = json.dumps(header).encode()
    sys.stdout.buffer.write(struct.pack("<I", len(body)) + body + raw)
    sys.stdout.buffer.flush()

while True:
    req = read()
    if req is None or req["op"] == "shutdown":
        break
    rid = req["id"]
    if req["op"] == "ping":
        write({"id": rid, "ok": True, "result": {"pid": 0}, "sizes": []})
    elif req["op"] == "huge":
        write({"id": rid, "ok": True, "result": {"$bytes": 0}, "sizes": [10**12]}, b"x" * 4096)
    elif req["op"] == "negative":
        write({"id": rid, "ok": True, "result": {"$bytes": 0}, "sizes": [-8]}, b"12345678")
    elif req["op"] == "bad_ref":
        write({"id": rid, "ok": True, "result": {"$tensor": 0, "dtype": "float32", "shape": [1000]}, "sizes": [8]}, b"12345678")
`;

function liarDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "hearth-liar-"));
  mkdirSync(join(dir, "hearth_engine"));
  writeFileSync(join(dir, "hearth_engine", "__init__.py"), "");
  writeFileSync(join(dir, "hearth_engine", "__main__.py"), LIAR);
  return dir;
}

async function protocolFailure(p: Promise<unknown>): Promise<EngineError> {
  const err = await p.then(
    (v) => assert.fail(`expected EngineError protocol, got ${JSON.stringify(v)?.slice(0, 80)}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof EngineError, String(err));
  assert.equal(err.code, "protocol", err.message);
  return err;
}

for (const [op, pattern] of [
  ["huge", /announces 1000000000000 payload bytes .*over the limit/],
  ["negative", /payload 0 of a frame has size -8/],
] as const) {
  test(`a reply announcing ${op === "huge" ? "a 1 TB" : "a negative"} payload fails its request at once and the engine is stopped`, { timeout: 30_000 }, async () => {
    const engine = await TensorEngine.start({ python: "/usr/bin/python3", engineDir: liarDir(), requestTimeoutMs: 20_000, hangTimeoutMs: null });
    try {
      const t0 = Date.now();
      const err = await protocolFailure(engine.request(op, {}));
      assert.match(err.message, pattern);
      assert.ok(Date.now() - t0 < 10_000, "it did not wait for the request deadline");
      await waitFor("the engine to be stopped", () => (engine.alive ? undefined : true), 5000);
      await protocolFailure(engine.request("ping", {}));
    } finally {
      await engine.close();
    }
  });
}

test("a reply whose tensor reference does not fit its payload fails that request; the link keeps working", { timeout: 30_000 }, async () => {
  const engine = await TensorEngine.start({ python: "/usr/bin/python3", engineDir: liarDir(), hangTimeoutMs: null });
  try {
    const err = await protocolFailure(engine.request("bad_ref", {}));
    assert.match(err.message, /float32 tensor of shape \[1000\] needs 4000 bytes; its payload has 8/);
    assert.deepEqual(await engine.request("ping", {}), { pid: 0 });
  } finally {
    await engine.close();
  }
});
