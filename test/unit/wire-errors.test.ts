// Every hearth error survives the wire: toWireError then fromWireError gives
// back the same class, name, message, every id field and the cause chain.
import assert from "node:assert/strict";
import { test } from "node:test";
import { encode, decode } from "../../sdk/wire/codec.js";
import * as errors from "../../sdk/errors/index.js";
import {
  AgentRequestError,
  BackpressureError,
  BufferLimitError,
  CacheFullError,
  ClosedError,
  ExecutorLostError,
  ExecutorNotFoundError,
  GangFailedError,
  HeadRestartedError,
  HearthError,
  ObjectEvictedError,
  ObjectNotFoundError,
  ObjectStorageError,
  ObjectCorruptError,
  ProjectSetupError,
  QueueFullError,
  RemoteError,
  ResreqError,
  ServiceConfigError,
  ServiceNotFoundError,
  ServiceStartError,
  StateFileError,
  TimeoutError,
  UsageError,
  VersionConflictError,
} from "../../sdk/errors/index.js";
import { AuthError, ConnectError, MAX_CAUSE_DEPTH, MessageTooLargeError, ProtocolError, WIRE_ERROR_NAMES, fromWireError, toWireError, type WireError } from "../../sdk/wire/errors.js";

const root = new TypeError("the root cause");
const hearthCause = new ObjectNotFoundError("no object 'w'", { key: "w", app: "a1", cause: root });

/** One of every class, each id filled with a value the decoder's fallbacks ("?", -1) could not fake. */
const samples: HearthError[] = [
  new HearthError("plain", { cause: root }),
  new ProtocolError("bad frame", { cause: root }),
  new AuthError("bad mac", { cause: root }),
  new ConnectError("no head", { cause: hearthCause }),
  new MessageTooLargeError(200_000, 131_072, "the arguments of f()", { cause: root }),
  new ResreqError("never fits", { resreq: "cpu=64", service: "big", cause: root }),
  new ServiceConfigError("bad warmup", { service: "pool1", field: "warmup", cause: root }),
  new ServiceNotFoundError("no service 's9'", { service: "s9", app: "a1", cause: root }),
  new ServiceStartError("init threw", { service: "svc", executorId: "x000007", cause: new RemoteError("RangeError", "weights missing", "RangeError: weights missing\n    at init", { service: "svc", executorId: "x000007" }) }),
  new GangFailedError("lost rank 2", { service: "g", rank: 2, executorId: "x000003", cause: root }),
  new TimeoutError("too slow", { service: "svc", executorId: "x000004", callId: 17, op: "obj-get", cause: root }),
  new ExecutorLostError("lost", { service: "svc", callId: 18, executorId: "x000005", cause: root }),
  new ExecutorNotFoundError("no executor", { service: "svc", executorId: "x000006", cause: root }),
  new QueueFullError("full", { service: "svc", limit: 10_000, cause: root }),
  new ClosedError("stopped", { service: "svc", cause: root }),
  new HeadRestartedError("restarted", { oldHeadId: "h-old", newHeadId: "h-new", cause: root }),
  new RemoteError("QuotaExceeded", "over quota", "QuotaExceeded: over quota\n    at level1", { service: "svc", executorId: "x000008", method: "failDeep", callId: 19 }, { cause: root }),
  new VersionConflictError("conflict", { key: "k", app: "a1", expected: 3, actual: 5, cause: root }),
  new ObjectNotFoundError("missing", { key: "k2", app: "a2", cause: root }),
  new ObjectEvictedError("evicted", { key: "k3", app: "a3", cause: root }),
  new CacheFullError("full", { key: "k4", app: "a4", size: 1024, limit: 512, cause: root }),
  new BufferLimitError("too big for a buffer", { key: "k7", app: "a7", size: 2048, limit: 1024, cause: root }),
  new ObjectStorageError("disk full", { key: "k5", app: "a5", op: "put", code: "ENOSPC", cause: root }),
  new ObjectCorruptError("bad sum", { key: "k6", app: "a6", part: 2, offset: 16 * 1024 * 1024, cause: root }),
  new BackpressureError("behind", { unread: 300 * 1024 * 1024, limit: 256 * 1024 * 1024, cause: root }),
  new StateFileError("bad state", { file: "/d/runtime/state.json", cause: new SyntaxError("Unexpected token") }),
  new AgentRequestError("no answer", { agentId: "n1", op: "reserve-port", cause: root }),
  new UsageError("bad --gpus", { flag: "--gpus", cause: root }),
  new ProjectSetupError("cannot unpack", { project: "abcdef0123456789", agentId: "n1", executorId: "x000009", cause: root }),
];

/** Fields every error has that are not ids (RemoteError's origin is checked through its ids). */
const NOT_IDS = new Set(["name", "message", "stack", "cause", "retryable", "origin", "remoteMessage", "remoteStack"]);

/** The wire form as a peer receives it: through msgpack, like every message. */
function overTheWire(err: unknown): Error {
  return fromWireError(decode(encode(toWireError(err))) as WireError);
}

test("every class the wire form rebuilds has a sample here, and every exported error class is rebuilt", () => {
  assert.deepEqual(samples.map((e) => e.name).sort(), [...WIRE_ERROR_NAMES].sort());
  const exported = Object.values(errors).filter((v): v is typeof HearthError => typeof v === "function" && (v === HearthError || v.prototype instanceof HearthError));
  for (const Cls of exported) assert.ok(WIRE_ERROR_NAMES.includes(Cls.name), `${Cls.name} is exported but fromWireError cannot rebuild it`);
});

test("each error lists every id field it carries in ids(), and each id is filled in the sample", () => {
  for (const e of samples) {
    const ids = e.ids();
    for (const field of Object.keys(e)) {
      if (NOT_IDS.has(field)) continue;
      assert.ok(field in ids, `${e.name}.${field} is a field but not in ids(), so the wire would drop it`);
    }
    for (const [k, v] of Object.entries(ids)) assert.notEqual(v, undefined, `${e.name}: the sample leaves ${k} empty`);
  }
});

test("an error round-trips with its class, name, message, every id and its cause", () => {
  for (const e of samples) {
    const back = overTheWire(e);
    assert.equal(back.constructor, e.constructor, e.name);
    assert.ok(back instanceof HearthError);
    assert.equal(back.name, e.name);
    const msg = e instanceof RemoteError ? e.remoteMessage : e.message;
    assert.equal(e instanceof RemoteError ? (back as RemoteError).remoteMessage : back.message, msg, `${e.name} message`);
    assert.deepEqual((back as HearthError).ids(), e.ids(), `${e.name} ids`);
    for (const [k, v] of Object.entries(e.ids())) assert.deepEqual((back as unknown as Record<string, unknown>)[k] ?? (back as RemoteError).origin?.[k as "service"], v, `${e.name}.${k}`);
    const cause = e.cause as Error;
    const backCause = back.cause as Error | undefined;
    assert.ok(backCause instanceof Error, `${e.name} lost its cause`);
    assert.equal(backCause.name, cause.name, `${e.name} cause name`);
    assert.equal(backCause instanceof RemoteError ? backCause.remoteMessage : backCause.message, cause instanceof RemoteError ? cause.remoteMessage : cause.message, `${e.name} cause message`);
  }
});

test("a hearth cause comes back as its own class with its ids, and the chain goes on below it", () => {
  const back = overTheWire(samples.find((e) => e instanceof ConnectError)) as ConnectError;
  const cause = back.cause as ObjectNotFoundError;
  assert.ok(cause instanceof ObjectNotFoundError);
  assert.deepEqual(cause.ids(), { key: "w", app: "a1" });
  const deeper = cause.cause as Error;
  assert.equal(deeper.name, "TypeError");
  assert.equal(deeper.message, "the root cause");

  const start = overTheWire(samples.find((e) => e instanceof ServiceStartError)) as ServiceStartError;
  const remote = start.cause as RemoteError;
  assert.ok(remote instanceof RemoteError);
  assert.equal(remote.remoteName, "RangeError");
  assert.match(remote.remoteStack, /at init/);
  assert.equal(remote.origin.executorId, "x000007");
});

test("a name hearth does not know reads as a HearthError naming it; as a cause it keeps its name", () => {
  const top = fromWireError({ name: "QuotaExceeded", message: "over", cause: { name: "OSError", message: "disk full" } });
  assert.ok(top instanceof HearthError);
  assert.equal(top.message, "QuotaExceeded: over");
  assert.equal((top.cause as Error).name, "OSError");
  assert.equal((top.cause as Error).message, "disk full");
});

test("a cause chain is cut at MAX_CAUSE_DEPTH levels, and malformed wire forms still decode", () => {
  let e: Error = new HearthError("level 0");
  for (let i = 1; i <= MAX_CAUSE_DEPTH + 3; i++) e = new HearthError(`level ${i}`, { cause: e });
  let w: WireError | undefined = toWireError(e);
  let depth = 0;
  while (w.cause) {
    w = w.cause;
    depth++;
  }
  assert.equal(depth, MAX_CAUSE_DEPTH);
  const bad = fromWireError({ name: "GangFailedError", message: 42, rank: "two", cause: "not an error" } as unknown as WireError) as GangFailedError;
  assert.ok(bad instanceof GangFailedError);
  assert.equal(bad.message, "42");
  assert.equal(bad.rank, -1);
  assert.equal(bad.service, "?");
  assert.equal(bad.cause, undefined);
});
