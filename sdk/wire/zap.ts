/**
 * The connection gate: ZAP (ZeroMQ RFC 27) for every hearth ROUTER. A ROUTER
 * cannot close one peer's connection once ZeroMQ accepted it (libzmq has no
 * per-peer disconnect for ROUTER, and zeromq.js hands out neither the file
 * descriptor nor the peer of a connection), so a connection is judged
 * during the ZeroMQ handshake, where a refusal makes libzmq close it at
 * once. A client proves there that it holds a hearth credential:
 *
 * - without CURVE it is a PLAIN client whose username is `role \0 id` and
 *   whose password is `HMAC-SHA256(key, "hearth-gate-v1" ‖ role ‖ id ‖ app)`
 *   in hex (64 characters) followed by `app`; the server checks the MAC with
 *   the key it would ask of that claim in the signed hello (authenticator.ts);
 * - with CURVE its public key is the proof (curve.ts).
 *
 * A connection with neither (an anonymous ZeroMQ peer) is refused and
 * closed: it never reaches the ROUTER and holds no descriptor. The gate
 * proves that the peer holds *a* credential, not which routing id it will
 * bind: the signed hello over a fresh nonce still binds role and identity to
 * the routing id, so a gate password seen on the network lets its holder
 * connect, never act as its owner.
 *
 * One process has one ZAP endpoint (`inproc://zeromq.zap.01` of the default
 * context), so the handler here serves every ROUTER of the process, each
 * under its own ZAP domain (the head's socket, an agent's cache socket).
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { Reply } from "zeromq";
import type { Credential, Role } from "./auth.js";

/** What a ROUTER's gate is asked about one new connection. */
export interface ZapRequest {
  /** The ZAP domain of the ROUTER. */
  domain: string;
  /** The peer's IP address (without port). */
  address: string;
  /** "NULL", "PLAIN" or "CURVE". */
  mechanism: string;
  /** PLAIN: username and password; CURVE: the client's public key (32 bytes). */
  credentials: Buffer[];
}

/** A gate: undefined lets the connection in; a string is why it is refused (for the log: the peer learns only that it was refused). */
export type ZapCheck = (req: ZapRequest) => string | undefined;

const ZAP_ENDPOINT = "inproc://zeromq.zap.01";
const checks = new Map<string, ZapCheck>();
let handler: Promise<Reply> | undefined;

/**
 * Serves ZAP requests for `domain` with `check` until the returned stop
 * function runs. The first domain of the process binds the ZAP endpoint; the
 * last one to stop closes it. A request for a domain nobody serves is refused.
 */
export async function serveZapDomain(domain: string, check: ZapCheck): Promise<() => void> {
  if (checks.has(domain)) throw new Error(`ZAP domain '${domain}' is already served in this process`);
  checks.set(domain, check);
  handler ??= startHandler();
  const socket = await handler;
  return () => {
    if (checks.get(domain) !== check) return;
    checks.delete(domain);
    if (checks.size === 0 && handler) {
      handler = undefined;
      socket.close();
    }
  };
}

async function startHandler(): Promise<Reply> {
  const zap = new Reply({ linger: 0 });
  await zap.bind(ZAP_ENDPOINT);
  void (async () => {
    try {
      for await (const [version, requestId, domain, address, , mechanism, ...credentials] of zap) {
        const req: ZapRequest = { domain: domain?.toString() ?? "", address: address?.toString() ?? "", mechanism: mechanism?.toString() ?? "", credentials };
        const check = checks.get(req.domain);
        let refusal: string | undefined;
        try {
          refusal = check ? check(req) : `no gate serves ZAP domain '${req.domain}'`;
        } catch (err) {
          refusal = `the gate failed: ${(err as Error).message}`;
        }
        // 400 for every refusal: libzmq answers it with an ERROR and closes the connection (a 300 would leave it open until the handshake times out).
        await zap.send([version!, requestId!, refusal === undefined ? "200" : "400", refusal === undefined ? "OK" : "refused", "", ""]);
      }
    } catch {
      // Closed.
    }
  })();
  return zap;
}

const GATE_LABEL = "hearth-gate-v1";
/** PLAIN carries at most 255 bytes in each of username and password. */
const PLAIN_MAX = 255;

function gateMac(key: Buffer, role: string, id: string, app: string): Buffer {
  return createHmac("sha256", key).update(`${GATE_LABEL}\0${role}\0${id}\0${app}`).digest();
}

/**
 * The PLAIN username and password that prove `cred` at a gate, or undefined
 * when its id or app is too long for PLAIN (255 bytes each; hearth's ids and
 * app names are far shorter).
 */
export function gateCredentials(cred: Credential): { username: string; password: string } | undefined {
  const username = `${cred.role}\0${cred.id}`;
  const password = `${gateMac(cred.key, cred.role, cred.id, cred.app).toString("hex")}${cred.app}`;
  if (Buffer.byteLength(username) > PLAIN_MAX || Buffer.byteLength(password) > PLAIN_MAX) return undefined;
  return { username, password };
}

/**
 * Checks a PLAIN gate proof with the key the server would ask of the claimed
 * (role, id, app) in the signed hello. Returns why it is refused, or undefined.
 */
export function checkGateProof(credentials: Buffer[], keyFor: (role: Role, id: string, app: string) => Buffer | string): string | undefined {
  const [user, pass] = credentials;
  if (!user || !pass || pass.length < 64) return "no hearth credential (an anonymous ZeroMQ peer)";
  const text = user.toString("utf8");
  const sep = text.indexOf("\0");
  const role = text.slice(0, sep) as Role;
  const id = text.slice(sep + 1);
  const mac = Buffer.from(pass.subarray(0, 64).toString("latin1"), "hex");
  const app = pass.subarray(64).toString("utf8");
  if (sep < 0 || !["admin", "driver", "agent", "executor"].includes(role)) return "a gate proof that names no role";
  const key = keyFor(role, id, app);
  if (typeof key === "string") return key;
  const expected = gateMac(key, role, id, app);
  return mac.length === expected.length && timingSafeEqual(expected, mac) ? undefined : `a wrong credential for ${role} '${id.slice(0, 80)}'${app ? ` of app '${app.slice(0, 80)}'` : ""}`;
}
