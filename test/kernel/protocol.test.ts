// The kernel through Debian's jupyter_client: one real kernel process, driven
// cell by cell as a notebook front end would.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { JupyterBridge, outputsOf, streamText, TempKernelspec } from "./bridge.js";

/** Waits until the running cell has written `file` (so an interrupt cannot arrive before the cell runs). */
async function waitForFile(file: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(file)) {
    if (Date.now() > deadline) throw new Error(`the cell did not start within ${timeoutMs} ms (no ${file})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let spec: TempKernelspec;
let bridge: JupyterBridge;
let kernelInfo: Record<string, any>;

before(async () => {
  spec = new TempKernelspec();
  const started = await JupyterBridge.start(spec);
  bridge = started.bridge;
  kernelInfo = started.startup.kernel_info as Record<string, any>;
  console.log(`# kernel ready in ${(started.startup.startup_s as number).toFixed(2)} s`);
});

after(async () => {
  try {
    if (bridge) {
      const closed = await bridge.close();
      assert.equal(closed.exited, true, "the kernel exits after shutdown_request");
      assert.equal(closed.reply.status, "ok");
    }
  } finally {
    bridge?.kill();
    spec?.remove();
  }
});

test("kernel_info names TypeScript and protocol 5.3", () => {
  assert.equal(kernelInfo.status, "ok");
  assert.equal(kernelInfo.protocol_version, "5.3");
  assert.equal(kernelInfo.implementation, "hearth");
  assert.equal(kernelInfo.language_info.name, "typescript");
  assert.equal(kernelInfo.language_info.file_extension, ".ts");
});

test("execute: execute_input with the count, stream output, execute_result of the last expression", async () => {
  const first = await bridge.execute("const base: number = 20;\nconsole.log('base is', base);");
  assert.equal(first.reply.status, "ok");
  const count = first.reply.execution_count as number;
  assert.ok(count >= 1);
  assert.deepEqual(outputsOf(first, "execute_input"), [{ code: "const base: number = 20;\nconsole.log('base is', base);", execution_count: count }]);
  assert.equal(streamText(first), "base is 20\n");
  assert.equal(outputsOf(first, "execute_result").length, 0, "a statement has no result");

  const second = await bridge.execute("base * 2 + 2");
  assert.equal(second.reply.execution_count, count + 1);
  assert.deepEqual(outputsOf(second, "execute_result"), [{ execution_count: count + 1, data: { "text/plain": "42" }, metadata: {} }]);
});

test("top-level await and a rich bundle through Symbol.for('Jupyter.display')", async () => {
  const r = await bridge.execute(
    "await new Promise((r) => setTimeout(r, 50));\n" +
      "({ [Symbol.for('Jupyter.display')]() { return { 'text/plain': 'plain', 'text/html': '<b>rich</b>' }; } })",
  );
  assert.equal(r.reply.status, "ok");
  const [result] = outputsOf(r, "execute_result");
  assert.deepEqual(result?.data, { "text/plain": "plain", "text/html": "<b>rich</b>" });
});

test("a thrown error: error message and reply with ename, evalue, traceback; the next cell still runs", async () => {
  const failed = await bridge.execute("function explode(): never { throw new RangeError('out of fuel'); }\nexplode();");
  assert.equal(failed.reply.status, "error");
  assert.equal(failed.reply.ename, "RangeError");
  assert.equal(failed.reply.evalue, "out of fuel");
  assert.ok((failed.reply.traceback as string[]).some((l) => l.includes("explode")), "the traceback names the throwing function");
  const [error] = outputsOf(failed, "error");
  assert.equal(error?.ename, "RangeError");
  assert.deepEqual(error?.traceback, failed.reply.traceback);

  // Sent at once after the failure: tslab would answer "abort" here.
  const next = await bridge.execute("'still alive'");
  assert.equal(next.reply.status, "ok");
  assert.equal(outputsOf(next, "execute_result")[0]?.data["text/plain"], "'still alive'");
});

test("a type error is an error reply naming the line, and declarations survive it", async () => {
  const bad = await bridge.execute("const label: string = 42;");
  assert.equal(bad.reply.status, "error");
  assert.equal(bad.reply.ename, "TypeScriptError");
  assert.match(bad.reply.evalue as string, /^1:7 - Type 'number' is not assignable to type 'string'/);
  const ok = await bridge.execute("base + 1");
  assert.equal(outputsOf(ok, "execute_result")[0]?.data["text/plain"], "21");
});

test("display_data and update_display_data with a display_id", async () => {
  const r = await bridge.execute(
    "const sink = (globalThis as any)[Symbol.for('hearth.display-sink')];\n" +
      "sink.display({ 'text/plain': 'step 0', 'text/html': '<i>0</i>' }, { displayId: 'bar-1' });\n" +
      "sink.display({ 'text/plain': 'step 1', 'text/html': '<i>1</i>' }, { displayId: 'bar-1', update: true });",
  );
  assert.equal(r.reply.status, "ok");
  const shown = outputsOf(r, "display_data");
  const updated = outputsOf(r, "update_display_data");
  assert.equal(shown.length, 1);
  assert.equal(updated.length, 1);
  assert.deepEqual(shown[0]?.transient, { display_id: "bar-1" });
  assert.deepEqual(updated[0]?.transient, { display_id: "bar-1" });
  assert.deepEqual(updated[0]?.data, { "text/plain": "step 1", "text/html": "<i>1</i>" });
  const order = r.outputs.map((o) => o.msg_type).filter((t) => t.includes("display"));
  assert.deepEqual(order, ["display_data", "update_display_data"]);
});

test("is_complete: open brackets are incomplete, a full statement is complete", async () => {
  const open = await bridge.request({ op: "is_complete", code: "for (let i = 0; i < 3; i++) {" });
  assert.equal(open.reply.status, "incomplete");
  const done = await bridge.request({ op: "is_complete", code: "const z = 1;" });
  assert.equal(done.reply.status, "complete");
});

test("complete sees declarations of earlier cells; inspect shows types", async () => {
  await bridge.execute("const measurements = { latencyMs: 3, throughput: 9 };");
  const code = "measurements.lat";
  const c = await bridge.request({ op: "complete", code, cursor_pos: code.length });
  assert.equal(c.reply.status, "ok");
  assert.ok((c.reply.matches as string[]).includes("latencyMs"), `matches: ${JSON.stringify(c.reply.matches)}`);
  assert.equal(c.reply.cursor_start, "measurements.".length);
  assert.equal(c.reply.cursor_end, code.length);

  const i = await bridge.request({ op: "inspect", code: "measurements", cursor_pos: 3 });
  assert.equal(i.reply.found, true);
  assert.match(i.reply.data["text/plain"] as string, /latencyMs: number/);
});

test("interrupt by signal stops a synchronous busy loop; the kernel stays usable", async () => {
  await bridge.execute("let spins = 0;");
  const marker = path.join(spec.prefix, "spinning");
  const { msg_id } = await bridge.request({ op: "send_execute", code: `import { writeFileSync } from "node:fs";\nwriteFileSync(${JSON.stringify(marker)}, "");\nwhile (true) { spins++; }` });
  await waitForFile(marker);
  await bridge.request({ op: "interrupt_signal" });
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any> };
  assert.equal(r.reply.status, "error");
  assert.equal(r.reply.ename, "KeyboardInterrupt");
  // Not `spins > 0`: V8 may sink the stores of an optimized tight loop, and termination drops them.
  const after = await bridge.execute("typeof spins");
  assert.equal(outputsOf(after, "execute_result")[0]?.data["text/plain"], "'number'");
});

test("interrupt_request stops a synchronous busy loop too, and the heartbeat answers meanwhile", async () => {
  await bridge.execute("let laps = 0;");
  const marker = path.join(spec.prefix, "looping");
  const { msg_id } = await bridge.request({ op: "send_execute", code: `import { writeFileSync } from "node:fs";\nwriteFileSync(${JSON.stringify(marker)}, "");\nwhile (true) { laps++; }` });
  await waitForFile(marker);
  const hb = await bridge.request({ op: "heartbeat" });
  assert.equal(hb.beating, true, "control and heartbeat live on their own thread");
  const i = await bridge.request({ op: "interrupt_request" });
  assert.equal(i.reply.status, "ok");
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any> };
  assert.equal(r.reply.ename, "KeyboardInterrupt");
  const after = await bridge.execute("typeof laps");
  assert.equal(outputsOf(after, "execute_result")[0]?.data["text/plain"], "'number'");
});

test("interrupt_request on control stops an awaiting cell; the kernel stays usable", async () => {
  const marker = path.join(spec.prefix, "awaiting");
  const code = `import { writeFileSync } from "node:fs";\nwriteFileSync(${JSON.stringify(marker)}, "");\nawait new Promise((r) => setTimeout(r, 600_000));`;
  const { msg_id } = await bridge.request({ op: "send_execute", code });
  await waitForFile(marker);
  const i = await bridge.request({ op: "interrupt_request" });
  assert.equal(i.msg_type, "interrupt_reply");
  assert.equal(i.reply.status, "ok");
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any> };
  assert.equal(r.reply.status, "error");
  assert.equal(r.reply.ename, "KeyboardInterrupt");
  const after = await bridge.execute("1 + 1");
  assert.equal(outputsOf(after, "execute_result")[0]?.data["text/plain"], "2");
});

test("interrupt by signal of an awaiting cell that added a SIGINT listener in its synchronous part (as run.train does): the cell ends, the listener hears it, the kernel lives", async () => {
  const marker = path.join(spec.prefix, "listening");
  const code = [
    'import { writeFileSync } from "node:fs";',
    // On globalThis: an interrupted cell's declarations do not reach later cells.
    "const box = globalThis as unknown as { heard: number; onStop: () => void };",
    "box.heard = 0;",
    "box.onStop = () => void box.heard++;",
    'process.on("SIGINT", box.onStop);',
    // The marker says the cell awaits: written after its synchronous part (and the kernel's re-arm after it) is over.
    // Written before, an interrupt could land in between, when vm's watchdog has let go of SIGINT and the kernel has not yet re-armed it.
    "await Promise.resolve();",
    `writeFileSync(${JSON.stringify(marker)}, "");`,
    "await new Promise((r) => setTimeout(r, 600_000));",
  ].join("\n");
  const { msg_id } = await bridge.request({ op: "send_execute", code });
  await waitForFile(marker);
  await bridge.request({ op: "interrupt_signal" });
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any> };
  assert.equal(r.reply.ename, "KeyboardInterrupt");
  assert.deepEqual(r.reply.traceback, ["KeyboardInterrupt: interrupted while the cell awaited (what it started may go on in the background)"], "what a front end shows: no tslab frames");
  const after = await bridge.execute('const seen = globalThis as unknown as { heard: number; onStop: () => void };\nprocess.off("SIGINT", seen.onStop);\nseen.heard');
  assert.equal(outputsOf(after, "execute_result")[0]?.data["text/plain"], "1", "the kernel is alive and the cell's own listener heard the interrupt once");
});

test("a rejection nobody awaits is reported, not fatal", async () => {
  const r = await bridge.execute("void Promise.reject(new Error('lost')); await new Promise((r) => setTimeout(r, 50));");
  assert.equal(r.reply.status, "ok");
  assert.match(streamText(r, "stderr"), /Unhandled: .*lost/s);
  const after = await bridge.execute("'ok'");
  assert.equal(after.reply.status, "ok");
});
