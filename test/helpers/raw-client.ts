/**
 * An independent driver for black-box tests: a bare ZeroMQ DEALER that speaks
 * the documented wire protocol (docs/protocol.md) without the SDK, and records
 * every message the head sends back. It proves the admin credential (the
 * signed hello of docs/protocol.md, done here with node:crypto, not the SDK),
 * unless given `credential: null`: then it is an anonymous peer. It passes
 * the connection gate (the gate proof of docs/protocol.md in the ZeroMQ
 * PLAIN handshake) with its credential, or with `gate` when given one: an
 * anonymous client with no gate proof is closed in the handshake.
 */
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Dealer } from "zeromq";
import { pack, unpack } from "msgpackr";

const MARK = Buffer.from("\0hearth-auth");

/** What a raw client proves: a role, an identity, an app and the HMAC key. */
export interface RawCredential {
  role: string;
  id: string;
  app: string;
  key: Buffer;
}

/** A credential derived from the cluster secret under HEARTH_HOME, as docs/protocol.md describes it. */
export function rawCredential(role: "admin" | "agent" | "executor" | "driver", id: string, app = "", home = process.env.HEARTH_HOME ?? path.join(os.homedir(), ".hearth")): RawCredential {
  const secret = Buffer.from(readFileSync(path.join(home, "secret"), "utf8").trim(), "hex");
  const label = role === "admin" ? "hearth/admin" : role === "agent" ? "hearth/agent" : role === "driver" ? `hearth/app\0${app}` : `hearth/executor\0${app}\0${id}`;
  return { role, id, app, key: createHmac("sha256", secret).update(label).digest() };
}

/**
 * The ZeroMQ socket options that pass a server's connection gate with `cred`
 * (docs/protocol.md): PLAIN, username `role \0 id`, password the hex HMAC of
 * "hearth-gate-v1 \0 role \0 id \0 app" followed by the app.
 */
export function rawGate(cred: RawCredential): { plainUsername: string; plainPassword: string } {
  const mac = createHmac("sha256", cred.key).update(`hearth-gate-v1\0${cred.role}\0${cred.id}\0${cred.app}`).digest("hex");
  return { plainUsername: `${cred.role}\0${cred.id}`, plainPassword: `${mac}${cred.app}` };
}

/** The admin credential (any app, shutdown, every app's status). */
export function rawAdminCredential(home?: string): RawCredential {
  return rawCredential("admin", "raw", "", home);
}

/** A message received from the head. */
export interface Received {
  header: any;
  payload?: unknown;
  at: number;
}

/** A raw protocol client that keeps every reply. */
export class RawClient {
  readonly socket: Dealer;
  readonly received: Received[] = [];
  /** Handshake messages the head sent (challenge, auth-ok, auth-failed). */
  readonly handshake: any[] = [];
  private rid = 1;
  private loop: Promise<void>;
  /** Resolves when the head accepted the credential (at once for an anonymous client). */
  readonly ready: Promise<void>;

  constructor(
    endpoint: string,
    routingId = `d.raw-${process.pid}-${Math.random().toString(36).slice(2)}`,
    credential: RawCredential | null = rawAdminCredential(),
    gate: RawCredential | null = credential,
  ) {
    const socket = new Dealer({ routingId, linger: 0, ...(gate ? rawGate(gate) : {}) });
    socket.connect(endpoint);
    this.socket = socket;
    let accepted: () => void = () => {};
    let refused: (e: Error) => void = () => {};
    this.ready = credential ? new Promise<void>((res, rej) => ((accepted = res), (refused = rej))) : Promise.resolve();
    this.ready.catch(() => undefined);
    if (credential) void socket.send([MARK, pack({ t: "auth-start" })]);
    this.loop = (async () => {
      try {
        for await (const [h, p] of socket) {
          if (h!.equals(MARK)) {
            const m = unpack(p!);
            this.handshake.push(m);
            if (m.t === "challenge" && credential) {
              const { role, id, app, key } = credential;
              const mac = createHmac("sha256", key).update(`hearth-auth-v1\0${role}\0${id}\0${app}\0`).update(m.nonce).update(Buffer.from(routingId)).digest();
              await socket.send([MARK, pack({ t: "auth", role, id, app, mac })]);
            } else if (m.t === "auth-ok") accepted();
            else if (m.t === "auth-failed") refused(new Error(`${m.error.name}: ${m.error.message}`));
            continue;
          }
          const header = unpack(h!);
          this.received.push({ header, payload: p ? unpack(p) : undefined, at: Date.now() });
        }
      } catch {
        // socket closed
      }
    })();
  }

  /** Sends raw frames. */
  async sendFrames(frames: Array<Buffer | string>): Promise<void> {
    await this.ready;
    await this.socket.send(frames);
  }

  /** Sends a request and waits (with a timeout) for its reply. */
  async request(op: string, fields: Record<string, unknown> = {}, timeoutMs = 10_000): Promise<any> {
    const rid = this.rid++;
    await this.ready;
    await this.socket.send([pack({ ...fields, t: "req", rid, op })]);
    const r = await this.waitFor((m) => m.header.t === "rep" && m.header.rid === rid, timeoutMs);
    if (!r.header.ok) throw new Error(`${r.header.error.name}: ${r.header.error.message}`);
    return r.header.value;
  }

  /** Sends a call with an explicit call id. */
  async call(cid: number, svc: string, method: string, args: unknown[]): Promise<void> {
    await this.ready;
    await this.socket.send([pack({ t: "call", cid, svc, method }), pack(args)]);
  }

  /** Waits until a received message matches, with a timeout. */
  async waitFor(match: (m: Received) => boolean, timeoutMs = 10_000): Promise<Received> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.received.find(match);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`no matching message from the head within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Answers to one call id (result or failed). */
  answersTo(cid: number): Received[] {
    return this.received.filter((m) => (m.header.t === "result" || m.header.t === "failed") && m.header.cid === cid);
  }

  async close(): Promise<void> {
    this.socket.close();
    await this.loop;
  }
}
