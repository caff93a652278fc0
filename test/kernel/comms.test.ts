// Comms through Debian's jupyter_client: comm_open/comm_msg/comm_close both
// ways and comm_info, then the training monitor widget (ipywidgets 8
// protocol): its models open, its chart updates while the cell still runs,
// and a click on its Stop button ends the loop early.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { JupyterBridge, outputsOf, TempKernelspec } from "./bridge.js";

interface IopubMessage {
  msg_type: string;
  content: Record<string, any>;
  metadata: Record<string, any>;
  parent_msg_id: string;
}

let spec: TempKernelspec;
let bridge: JupyterBridge;

before(async () => {
  spec = new TempKernelspec();
  bridge = (await JupyterBridge.start(spec)).bridge;
});

after(async () => {
  try {
    if (bridge) await bridge.close();
  } finally {
    bridge?.kill();
    spec?.remove();
  }
});

async function waitFor(msgType: string, count: number, commId?: string, timeout = 20): Promise<IopubMessage[]> {
  return ((await bridge.request({ op: "iopub_wait", msg_type: msgType, count, comm_id: commId, timeout })) as { messages: IopubMessage[] }).messages;
}

const send = (msgType: string, content: Record<string, unknown>) => bridge.request({ op: "comm_send", msg_type: msgType, content });

test("a comm the front end opens reaches its registered target; messages go both ways; close and comm_info", async () => {
  const setup = await bridge.execute(
    'import { registerCommTarget } from "hearth/notebook";\n' +
      "const closed: unknown[] = [];\n" +
      'registerCommTarget("hearth.echo", (comm, data) => {\n' +
      "  comm.send({ opened_with: data });\n" +
      "  comm.onMessage((d) => comm.send({ echo: d }));\n" +
      "  comm.onClose((d) => closed.push(d));\n" +
      "});",
  );
  assert.equal(setup.reply.status, "ok");
  await send("comm_open", { comm_id: "echo-1", target_name: "hearth.echo", data: { hello: 1 } });
  const [opened] = (await waitFor("comm_msg", 1, "echo-1")).filter((m) => m.msg_type === "comm_msg");
  assert.deepEqual(opened?.content, { comm_id: "echo-1", data: { opened_with: { hello: 1 } } });

  const info = await bridge.request({ op: "comm_info", target_name: "hearth.echo" });
  assert.deepEqual(info.reply.comms, { "echo-1": { target_name: "hearth.echo" } });

  await send("comm_msg", { comm_id: "echo-1", data: { x: 2 } });
  const [echoed] = (await waitFor("comm_msg", 1, "echo-1")).filter((m) => m.msg_type === "comm_msg");
  assert.deepEqual(echoed?.content.data, { echo: { x: 2 } });

  await send("comm_close", { comm_id: "echo-1", data: { bye: true } });
  const after = await bridge.execute("closed");
  assert.equal(outputsOf(after, "execute_result")[0]?.data["text/plain"], "[ { bye: true } ]");
  const none = await bridge.request({ op: "comm_info" });
  assert.equal(none.reply.comms["echo-1"], undefined, "a closed comm is no longer listed");

  // Nobody listens on this target: the kernel closes the comm at once, as ipykernel does.
  await send("comm_open", { comm_id: "nobody-1", target_name: "no.such.target", data: {} });
  const [refused] = (await waitFor("comm_close", 1, "nobody-1")).filter((m) => m.msg_type === "comm_close");
  assert.equal(refused?.content.comm_id, "nobody-1");
});

test("a comm the kernel opens: comm_open with data and metadata, then comm_msg, as outputs of the cell", async () => {
  const r = await bridge.execute('import { openComm } from "hearth/notebook";\nconst k = openComm("hearth.k", { data: { a: 1 }, metadata: { v: "1" }, commId: "k-1" });\nk.send({ b: 2 });\nk.close();');
  assert.equal(r.reply.status, "ok");
  assert.deepEqual(outputsOf(r, "comm_open"), [{ comm_id: "k-1", target_name: "hearth.k", data: { a: 1 } }]);
  assert.deepEqual(outputsOf(r, "comm_msg"), [{ comm_id: "k-1", data: { b: 2 } }]);
  assert.deepEqual(outputsOf(r, "comm_close"), [{ comm_id: "k-1", data: {} }]);
});

test("training monitor: widget models open, the chart updates while the loop runs, Stop ends the loop early", async () => {
  const LIMIT = 3000;
  const code =
    'import { trainingMonitor } from "hearth/notebook";\n' +
    'const monitor = trainingMonitor({ title: "demo", metrics: ["loss"], intervalMs: 0 });\n' +
    "monitor.show();\n" +
    "let steps = 0;\n" +
    `while (steps < ${LIMIT} && !monitor.signal.aborted) {\n` +
    "  await new Promise((r) => setTimeout(r, 10));\n" +
    "  steps++;\n" +
    "  monitor.push({ step: steps, loss: 1 / steps });\n" +
    "}\n" +
    "monitor.finish();\n" +
    "({ steps, points: monitor.history.length, aborted: monitor.signal.aborted })";
  const { msg_id } = await bridge.request({ op: "send_execute", code });
  const shown = await waitFor("display_data", 1);
  const opens = shown.filter((m) => m.msg_type === "comm_open" && m.parent_msg_id === msg_id);
  const byModel = (name: string) => opens.filter((m) => m.content.data.state._model_name === name);
  for (const m of opens) {
    assert.equal(m.content.target_name, "jupyter.widget");
    assert.equal(m.metadata.version, "2.1.0", "ipywidgets 8 protocol version in comm_open metadata");
  }
  const [chart] = byModel("HTMLModel");
  const [button] = byModel("ButtonModel");
  const [column] = byModel("VBoxModel");
  assert.ok(chart && button && column, `HTML, Button and VBox models opened: ${opens.map((m) => m.content.data.state._model_name).join(", ")}`);
  assert.equal(button.content.data.state.description, "Stop");
  const view = shown.find((m) => m.msg_type === "display_data")!;
  assert.deepEqual(view.content.data["application/vnd.jupyter.widget-view+json"], { model_id: column.content.comm_id, version_major: 2, version_minor: 0 });
  assert.match(view.content.data["text/plain"] as string, /^demo:/);
  const refs = new Set(opens.map((m) => `IPY_MODEL_${m.content.comm_id}`));
  for (const m of opens) for (const child of m.content.data.state.children ?? []) assert.ok(refs.has(child), `child ${child} is an opened model`);

  // The chart redraws while the cell still runs.
  const updates = (await waitFor("comm_msg", 3, chart.content.comm_id)).filter((m) => m.msg_type === "comm_msg" && m.content.comm_id === chart.content.comm_id);
  assert.ok(updates.length >= 3);
  for (const u of updates) {
    assert.equal(u.content.data.method, "update");
    assert.match(u.content.data.state.value as string, /<polyline/);
  }

  await send("comm_msg", { comm_id: button.content.comm_id, data: { method: "custom", content: { event: "click" } } });
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 30 })) as { reply: Record<string, any>; outputs: Array<{ msg_type: string; content: Record<string, any> }> };
  assert.equal(r.reply.status, "ok");
  const result = outputsOf(r, "execute_result")[0]?.data["text/plain"] as string;
  const steps = Number(/steps: (\d+)/.exec(result)?.[1]);
  assert.ok(steps > 0 && steps < LIMIT, `the loop ended early on Stop (${result})`);
  assert.match(result, /aborted: true/);
  assert.match(result, new RegExp(`points: ${steps}\\b`), "the step in flight finished and was drawn");
  const disabled = outputsOf(r, "comm_msg").filter((c) => c.comm_id === button.content.comm_id && c.data.state?.disabled === true);
  assert.ok(disabled.length >= 1, "the button is disabled once pressed");
  const snapshot = outputsOf(r, "update_display_data").at(-1);
  assert.match(snapshot?.data["text/plain"] as string, new RegExp(`step ${steps} .*stopped at step ${steps}`), "the static snapshot shows where it stopped");

  // A reloaded page asks for state: the model answers with all of it.
  await send("comm_msg", { comm_id: chart.content.comm_id, data: { method: "request_state" } });
  const [state] = (await waitFor("comm_msg", 1, chart.content.comm_id)).filter((m) => m.msg_type === "comm_msg" && m.content.comm_id === chart.content.comm_id);
  assert.equal(state?.content.data.state._model_name, "HTMLModel");
  assert.match(state?.content.data.state.value as string, /<polyline/);
  const info = await bridge.request({ op: "comm_info", target_name: "jupyter.widget" });
  for (const m of opens) assert.ok(info.reply.comms[m.content.comm_id], `comm_info lists ${m.content.data.state._model_name}`);
});
