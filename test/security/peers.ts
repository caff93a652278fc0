/**
 * Attackers for the adversarial suite: bare ZeroMQ DEALERs that hold no
 * credential (or a forged one) and try the documented protocol on a real
 * head or agent cache socket.
 */
import { createHmac, randomBytes } from "node:crypto";
import { Dealer } from "zeromq";
import { pack, unpack } from "msgpackr";

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

/**
 * Connects as `routingId` with no credential, sends `messages`, waits for the
 * challenge (the server has the messages and holds them), answers it with a
 * MAC made with a random key as `claim`, and waits for the refusal. Returns
 * everything the server sent: a protected server sends only the challenge
 * and the refusal.
 */
export async function attack(
  endpoint: string,
  messages: Buffer[][],
  opts: { routingId?: string; claim?: { role: string; id: string; app: string }; key?: Buffer; timeoutMs?: number } = {},
): Promise<Outcome> {
  const routingId = opts.routingId ?? `d.attacker-${randomBytes(6).toString("hex")}`;
  const socket = new Dealer({ routingId, linger: 0 });
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
    return out;
  } finally {
    socket.close();
  }
}
