// input() and password() through Jupyter's stdin channel, driven by Debian's
// jupyter_client: input_request/input_reply when the front end allows stdin,
// an immediate clear error when it does not, and an interrupt while waiting.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { JupyterBridge, outputsOf, TempKernelspec } from "./bridge.js";

let spec: TempKernelspec;
let bridge: JupyterBridge;

before(async () => {
  spec = new TempKernelspec();
  bridge = (await JupyterBridge.start(spec)).bridge;
  await bridge.execute('import { input, password } from "hearth/notebook";');
});

after(async () => {
  try {
    if (bridge) await bridge.close();
  } finally {
    bridge?.kill();
    spec?.remove();
  }
});

test("input() and password() send input_request on stdin and resolve with the input_reply", async () => {
  const code = 'const who = await input("name? ");\nconst secret = await password("token: ");\n`${who} typed ${secret.length} characters`';
  const { msg_id } = await bridge.request({ op: "send_execute", code, allow_stdin: true });
  const first = await bridge.request({ op: "stdin_request", timeout: 20 });
  assert.equal(first.msg_type, "input_request");
  assert.deepEqual(first.content, { prompt: "name? ", password: false });
  assert.equal(first.parent_msg_id, msg_id, "the input_request's parent is the cell's execute_request");
  await bridge.request({ op: "input_reply", value: "ada" });
  const second = await bridge.request({ op: "stdin_request", timeout: 20 });
  assert.deepEqual(second.content, { prompt: "token: ", password: true });
  await bridge.request({ op: "input_reply", value: "s3cret" });
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any>; outputs: Array<{ msg_type: string; content: Record<string, any> }> };
  assert.equal(r.reply.status, "ok");
  assert.equal(outputsOf(r, "execute_result")[0]?.data["text/plain"], "'ada typed 6 characters'");
});

test("without allow_stdin, input() fails at once with an error that says why", async () => {
  const r = await bridge.request({ op: "execute", code: 'await input("anyone? ")', allow_stdin: false, timeout: 15 });
  assert.equal(r.reply.status, "error");
  assert.equal(r.reply.ename, "StdinNotAllowedError");
  assert.match(r.reply.evalue as string, /allow_stdin is false/);
  // Not a stdin round trip: nothing was asked.
  await assert.rejects(bridge.request({ op: "stdin_request", timeout: 1 }), /Empty/);
});

test("input() with a default answers it where the front end takes no input (nbclient); where it does, the person's answer wins", async () => {
  const code = 'await input("how many? ", { default: "7" })';
  const unattended = (await bridge.request({ op: "execute", code, allow_stdin: false, timeout: 15 })) as { reply: Record<string, any>; outputs: Array<{ msg_type: string; content: Record<string, any> }> };
  assert.equal(unattended.reply.status, "ok");
  assert.equal(outputsOf(unattended, "execute_result")[0]?.data["text/plain"], "'7'");
  const { msg_id } = await bridge.request({ op: "send_execute", code, allow_stdin: true });
  const asked = await bridge.request({ op: "stdin_request", timeout: 20 });
  assert.deepEqual(asked.content, { prompt: "how many? ", password: false }, "a front end that takes input is asked");
  await bridge.request({ op: "input_reply", value: "12" });
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any>; outputs: Array<{ msg_type: string; content: Record<string, any> }> };
  assert.equal(outputsOf(r, "execute_result")[0]?.data["text/plain"], "'12'");
});

test("an interrupt while input() waits ends the cell as KeyboardInterrupt; the next input() works", async () => {
  const { msg_id } = await bridge.request({ op: "send_execute", code: 'await input("waiting: ")', allow_stdin: true });
  const asked = await bridge.request({ op: "stdin_request", timeout: 20 });
  assert.equal(asked.content.prompt, "waiting: ");
  const i = await bridge.request({ op: "interrupt_request" });
  assert.equal(i.reply.status, "ok");
  const r = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any> };
  assert.equal(r.reply.status, "error");
  assert.equal(r.reply.ename, "KeyboardInterrupt");

  // A late answer to the interrupted prompt is dropped, not given to the next input().
  await bridge.request({ op: "input_reply", value: "too late" });
  const again = await bridge.request({ op: "send_execute", code: 'await input("again: ")', allow_stdin: true });
  const prompt = await bridge.request({ op: "stdin_request", timeout: 20 });
  assert.equal(prompt.content.prompt, "again: ");
  await bridge.request({ op: "input_reply", value: "fresh" });
  const done = (await bridge.request({ op: "collect", msg_id: again.msg_id, timeout: 20 })) as { reply: Record<string, any>; outputs: Array<{ msg_type: string; content: Record<string, any> }> };
  assert.equal(outputsOf(done, "execute_result")[0]?.data["text/plain"], "'fresh'");
});

test("an input_reply made before the request now asking is dropped; the answer after it is taken", async () => {
  // stdin and shell are separate connections: a late answer to an interrupted prompt can reach the kernel after the
  // next cell's execute_request. Sent here after the new prompt, dated before it, it must not answer it.
  const { msg_id } = await bridge.request({ op: "send_execute", code: 'await input("now: ")', allow_stdin: true });
  const asked = await bridge.request({ op: "stdin_request", timeout: 20 });
  assert.equal(asked.content.prompt, "now: ");
  await bridge.request({ op: "input_reply", value: "stale", made_seconds_ago: 5 });
  await bridge.request({ op: "input_reply", value: "fresh" });
  const done = (await bridge.request({ op: "collect", msg_id, timeout: 20 })) as { reply: Record<string, any>; outputs: Array<{ msg_type: string; content: Record<string, any> }> };
  assert.equal(done.reply.status, "ok");
  assert.equal(outputsOf(done, "execute_result")[0]?.data["text/plain"], "'fresh'");
});
