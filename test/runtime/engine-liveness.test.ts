/**
 * Tensor engine liveness on the real Python process: a request past its
 * deadline kills the (wedged) engine and fails with code `timeout`; an engine
 * whose process stops heartbeating is killed as hung (code `hung`) and
 * reported to the process's engine registry; an engine whose parent dies
 * while it computes exits on its own.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { DEFAULT_HANG_TIMEOUT_MS, EngineError, TensorEngine, engineLiveness, onEngineChange, type EngineLiveness } from "../../sdk/tensor/index.js";
import { findEngineDir, findPython } from "../../sdk/tensor/python.js";
import { pidAlive, rejection, waitFor, waitForExit } from "../helpers/cluster.js";

test("a request past its deadline fails with code timeout and the wedged engine is killed", { timeout: 60_000 }, async () => {
  const engine = await TensorEngine.start();
  const pid = engine.pid!;
  try {
    // SIGSTOP: the process exists but can never answer, like an engine stuck in a kernel.
    process.kill(pid, "SIGSTOP");
    const { error, ms } = await rejection(engine.ping({ timeoutMs: 300 }));
    assert.ok(error instanceof EngineError, String(error));
    assert.equal(error.code, "timeout");
    assert.match(error.message, /'ping' got no reply within 300 ms; the engine \(pid \d+\) was killed/);
    assert.ok(ms < 2000, `failed after ${ms} ms`);
    await waitForExit("the wedged engine", pid, 5000);
    assert.equal(engine.alive, false);
    const later = await rejection(engine.ping());
    assert.ok(later.error instanceof EngineError && later.error.code === "timeout", String(later.error));
  } finally {
    if (pidAlive(pid)) process.kill(pid, "SIGKILL");
    await engine.close();
  }
});

test("an engine whose process stops heartbeating is killed as hung (long before any request deadline) and reported", { timeout: 60_000 }, async () => {
  const engine = await TensorEngine.start();
  const pid = engine.pid!;
  const changes: EngineLiveness[] = [];
  const unsubscribe = onEngineChange((c) => changes.push(c));
  try {
    assert.deepEqual(engineLiveness().find((l) => l.pid === pid)?.state, "running");
    process.kill(pid, "SIGSTOP");
    const pending = engine.ping({ timeoutMs: 60_000 });
    const { error, ms } = await rejection(pending);
    assert.ok(error instanceof EngineError, String(error));
    assert.equal(error.code, "hung");
    assert.match(error.message, new RegExp(`the engine \\(pid ${pid}\\) sent no heartbeat for \\d+ ms \\(limit ${DEFAULT_HANG_TIMEOUT_MS} ms\\)`));
    assert.ok(ms < DEFAULT_HANG_TIMEOUT_MS + 2000, `killed as hung after ${ms} ms`);
    await waitForExit("the hung engine", pid, 5000);
    assert.deepEqual(changes.map((c) => [c.pid, c.state]), [[pid, "hung"]], "reported once, as hung");
    assert.equal(engineLiveness().find((l) => l.pid === pid)?.state, "hung", "it stays reported until its owner closes it");
    await engine.close();
    assert.equal(engineLiveness().some((l) => l.pid === pid), false, "a closed engine is not reported");
  } finally {
    unsubscribe();
    if (pidAlive(pid)) process.kill(pid, "SIGKILL");
    await engine.close();
  }
});

// A stand-in engine (a fake at the pipe interface): it speaks the frame protocol and beats on
// HEARTH_ENGINE_BEAT_FD like the real one, and its ops stop the beats while burning CPU or sleeping.
const FAKE_ENGINE = String.raw`
import json, os, struct, sys, threading, time
out = os.fdopen(os.dup(1), "wb")
beating = threading.Event(); beating.set()
def beat():
    fd = int(os.environ["HEARTH_ENGINE_BEAT_FD"])
    while True:
        time.sleep(0.2)
        if beating.is_set(): os.write(fd, b".")
threading.Thread(target=beat, daemon=True).start()
def reply(rid, result):
    raw = json.dumps({"id": rid, "ok": True, "result": result, "sizes": []}).encode()
    out.write(struct.pack("<I", len(raw)) + raw); out.flush()
while True:
    head = sys.stdin.buffer.read(4)
    if len(head) < 4: break
    header = json.loads(sys.stdin.buffer.read(struct.unpack("<I", head)[0]))
    op = header["op"]
    if op == "busy":
        beating.clear()
        end = time.time() + 5
        while time.time() < end: pass
    if op == "frozen":
        beating.clear()
        time.sleep(5)
    beating.set()
    reply(header["id"], {"op": op, "pid": os.getpid()})
`;

function fakeEngineDir(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-fake-engine-"));
  mkdirSync(path.join(dir, "hearth_engine"));
  writeFileSync(path.join(dir, "hearth_engine", "__init__.py"), "");
  writeFileSync(path.join(dir, "hearth_engine", "__main__.py"), FAKE_ENGINE);
  return dir;
}

test("a silent engine that still uses CPU (a C call holding the GIL) is busy, not hung; a silent idle one is killed as frozen", { timeout: 60_000 }, async () => {
  const engine = await TensorEngine.start({ engineDir: fakeEngineDir() });
  try {
    // 5 s without a beat, well past the 3 s limit, while spinning: the request is answered.
    assert.deepEqual(await engine.request("busy", {}, { timeoutMs: 20_000 }), { op: "busy", pid: engine.pid });
    assert.equal(engine.alive, true);
    const { error, ms } = await rejection(engine.request("frozen", {}, { timeoutMs: 20_000 }));
    assert.ok(error instanceof EngineError && error.code === "hung", String(error));
    assert.match(error.message, /its process is frozen \(state [SD], no CPU used for 250 ms\), so it was killed/);
    assert.ok(ms < 5000, `killed as frozen after ${ms} ms`);
  } finally {
    await engine.close();
  }
});

test("an engine exits when its parent dies while it is computing (not reading stdin)", { timeout: 60_000 }, async () => {
  const python = await findPython();
  const engineDir = findEngineDir();
  // The engine's own watchdog (started by its main()), with the main thread busy in torch the whole time.
  const code = [
    "import sys, torch",
    `sys.path.insert(0, ${JSON.stringify(engineDir)})`,
    "from hearth_engine.server import start_parent_watchdog",
    "start_parent_watchdog()",
    "print('computing', flush=True)",
    "a = torch.randn(128, 128)",
    "while True: a = torch.tanh(a @ a)",
  ].join("\n");
  // The parent stands in for an executor: it holds the engine's pipes and dies with SIGKILL.
  const parentSrc = `
    const { spawn } = require("node:child_process");
    const child = spawn(${JSON.stringify(python)}, ["-c", ${JSON.stringify(code)}], { stdio: ["pipe", "pipe", "inherit"] });
    child.stdout.on("data", (d) => { if (String(d).includes("computing")) console.log("engine " + child.pid); });
  `;
  const parent = spawn(process.execPath, ["-e", parentSrc], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  parent.stdout.on("data", (d: Buffer) => (out += d.toString()));
  let enginePid: number | undefined;
  try {
    enginePid = Number(await waitFor("the engine to start computing", () => /engine (\d+)/.exec(out)?.[1], 40_000));
    parent.kill("SIGKILL");
    const ms = await waitForExit("the orphaned engine", enginePid, 5000);
    assert.ok(!pidAlive(enginePid), `engine gone ${ms} ms after its parent`);
  } finally {
    parent.kill("SIGKILL");
    if (enginePid && pidAlive(enginePid)) process.kill(enginePid, "SIGKILL");
  }
});
