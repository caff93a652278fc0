/**
 * Attackers for the adversarial suite: bare ZeroMQ DEALERs that try the
 * documented protocol on a real head or agent cache socket. One with no
 * credential at all is closed in the ZeroMQ handshake by the connection
 * gate (`anonymous`); to test what lies behind the gate, `attack` passes it
 * with the token of an unrelated app (an insider of another app, by
 * default) and then claims an identity it cannot prove.
 */
import { createHmac, randomBytes } from "node:crypto";
import { Dealer } from "zeromq";
import { pack, unpack } from "msgpackr";
import { rawCredential, rawGate, type RawCredential } from "../helpers/raw-client.js";

const MARK = Buffer.from("\0hearth-auth");

/** What a head or agent sent an attacker: handshake messages and anything else. */
export interface Outcome {
  handshake: any[];
  replies: any[];
}

/** Frames of a request message as docs/protocol.md describes it. */
export function req(op: string, fields: Record<string, unknown> = {}, rid = 1): Buffer[] {
  return [pack({ ...fields, t: "req", rid, op })];
}

/** Frames of any header-only message. */
export function msg(header: Record<string, unknown>, ...payload: unknown[]): Buffer[] {
  return [pack(header), ...payload.map((p) => pack(p))];
}

async function next(socket: Dealer, out: Outcome, want: string, timeoutMs: number): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  socket.receiveTimeout = timeoutMs;
  for (;;) {
    if (Date.now() > deadline) throw new Error(`no '${want}' within ${timeoutMs} ms`);
    const [h, p] = await socket.receive();
    if (h!.equals(MARK)) {
      const m = unpack(p!);
      out.handshake.push(m);
      if (m.t === want) return m;
    } else {
      out.replies.push(unpack(h!));
    }
  }
}

/** What a protected server sends a peer that forged its answer: a challenge, the refusal, and a new challenge for the probe sent after it. */
export const REFUSED = ["challenge", "auth-failed", "challenge"];

/** The token of an app unrelated to any victim: what passes the gate for an insider of another app. */
export function outsider(): RawCredential {
  return rawCredential("driver", "outsider", "outsider");
}

/**
 * Connects with no credential (no gate proof: ZeroMQ's NULL mechanism), or
 * with the gate proof of `gate`, and sends `messages`. Resolves with how the
 * connection ended in the handshake (the monitor's event) and everything
 * received, once it was refused; fails after `timeoutMs`.
 */
export async function refusedAtGate(endpoint: string, messages: Buffer[][], opts: { gate?: RawCredential; timeoutMs?: number } = {}): Promise<{ refused: string; received: Buffer[][] }> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const socket = new Dealer({ linger: 0, reconnectInterval: 60_000, ...(opts.gate ? rawGate(opts.gate) : {}) });
  const received: Buffer[][] = [];
  try {
    const refused = new Promise<string>((resolve) => {
      for (const t of ["handshake:error:protocol", "handshake:error:auth", "handshake:error:other"] as const) socket.events.on(t, (e) => resolve(`${t}: ${e.error.message}`));
    });
    socket.connect(endpoint);
    for (const m of messages) void socket.send(m).catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const why = await Promise.race([refused, new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`the connection was not refused in the handshake within ${timeoutMs} ms`)), timeoutMs)))]);
    clearTimeout(timer);
    socket.receiveTimeout = 0;
    for (;;) {
      try {
        received.push(await socket.receive());
      } catch {
        break;
      }
    }
    return { refused: why, received };
  } finally {
    socket.close();
  }
}

/**
 * Connects as `routingId`, passing the gate with `gate` (default: an
 * unrelated app's token; at an agent's cache, which admits only its own
 * executors, give one of them), sends `messages`, waits for the
 * challenge (the server has the messages and holds them), answers it with a
 * MAC made with a random key as `claim`, waits for the refusal, then keeps
 * listening (a probe sent after it must bring a new challenge and nothing
 * else). Returns everything the server sent: a protected server sends only
 * the challenge, the refusal and the probe's challenge (`REFUSED`).
 */
export async function attack(
  endpoint: string,
  messages: Buffer[][],
  opts: { routingId?: string; claim?: { role: string; id: string; app: string }; key?: Buffer; timeoutMs?: number; gate?: RawCredential } = {},
): Promise<Outcome> {
  const routingId = opts.routingId ?? `d.attacker-${randomBytes(6).toString("hex")}`;
  const socket = new Dealer({ routingId, linger: 0, ...rawGate(opts.gate ?? outsider()) });
  const out: Outcome = { handshake: [], replies: [] };
  try {
    socket.connect(endpoint);
    for (const m of messages) await socket.send(m);
    const timeoutMs = opts.timeoutMs ?? 5000;
    const challenge = await next(socket, out, "challenge", timeoutMs);
    const { role, id, app } = opts.claim ?? { role: "admin", id: "attacker", app: "" };
    const key = opts.key ?? randomBytes(32);
    const mac = createHmac("sha256", key).update(`hearth-auth-v1\0${role}\0${id}\0${app}\0`).update(challenge.nonce).update(Buffer.from(routingId)).digest();
    await socket.send([MARK, pack({ t: "auth", role, id, app, mac })]);
    await next(socket, out, "auth-failed", timeoutMs);
    // Keep listening past the refusal: one more request, which a protected server answers with a fresh challenge
    // (the peer is nobody again). Replies on one connection arrive in order, so when that challenge is here,
    // anything the server would have sent for the messages above (held, then dropped at the refusal) is here too.
    await socket.send(req("status", { all: true }, 999));
    await next(socket, out, "challenge", timeoutMs);
    return out;
  } finally {
    socket.close();
  }
}
