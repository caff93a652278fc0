// Unit tests of the wire layer: HMAC signing per the Jupyter spec, parsing, tampering.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";
import { newHeader, parseMessage, replyTo, serializeMessage, Signer, WireError } from "../../kernel/wire.js";

const KEY = "0f1e2d3c-secret";

test("signature is hex HMAC-SHA256 over header, parent, metadata and content", () => {
  const signer = new Signer(KEY);
  const msg = replyTo(null, "status", { execution_state: "idle" }, "s1", [Buffer.from("client-1")]);
  const frames = serializeMessage(msg, signer);
  assert.equal(frames[0]!.toString(), "client-1");
  assert.equal(frames[1]!.toString(), "<IDS|MSG>");
  const h = createHmac("sha256", KEY);
  for (const f of frames.slice(3, 7)) h.update(f);
  assert.equal(frames[2]!.toString(), h.digest("hex"));
});

test("parse round-trips ids, header, content and buffers", () => {
  const signer = new Signer(KEY);
  const parent = { ...replyTo(null, "execute_request", { code: "1" }, "s", [Buffer.from("a"), Buffer.from("b")]), buffers: [Buffer.from([1, 2, 3])] };
  const parsed = parseMessage(serializeMessage(parent, signer), signer);
  assert.deepEqual(parsed.ids.map(String), ["a", "b"]);
  assert.equal(parsed.header.msg_type, "execute_request");
  assert.deepEqual(parsed.content, { code: "1" });
  assert.deepEqual([...parsed.buffers[0]!], [1, 2, 3]);
  const reply = replyTo(parsed, "execute_reply", { status: "ok" }, "k");
  assert.deepEqual(reply.parent_header, parsed.header);
  assert.deepEqual(reply.ids.map(String), ["a", "b"]);
});

test("a tampered content frame or a wrong key is rejected", () => {
  const signer = new Signer(KEY);
  const frames = serializeMessage(replyTo(null, "execute_request", { code: "1" }, "s"), signer);
  const tampered = [...frames];
  tampered[5] = Buffer.from(JSON.stringify({ code: "2" }));
  assert.throws(() => parseMessage(tampered, signer), WireError);
  assert.throws(() => parseMessage(frames, new Signer("other")), WireError);
});

test("an empty key means unsigned messages, and a message without delimiter is malformed", () => {
  const none = new Signer("");
  const frames = serializeMessage(replyTo(null, "kernel_info_request", {}, "s"), none);
  assert.equal(frames[1]!.toString(), "");
  assert.equal(parseMessage(frames, none).header.msg_type, "kernel_info_request");
  assert.throws(() => parseMessage([Buffer.from("x")], none), /malformed/);
  assert.equal(newHeader("x", "s").version, "5.3");
});
