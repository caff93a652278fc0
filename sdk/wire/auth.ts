/**
 * Credentials. Every cluster has one secret (32 random bytes) made on first
 * use under HEARTH_HOME (folder 0700, file 0600). Nobody connects with the
 * secret itself: each peer proves a key derived from it for one role and one
 * identity (HMAC-SHA256), over a nonce the server chose and the peer's routing
 * id (see authenticator.ts for the handshake):
 *
 * - admin: shutdown, status of every app, and any app as a driver;
 * - driver of app A: app A only (an app token; hand it to someone to give
 *   them that app and nothing else);
 * - agent: registers and reports its own executors;
 * - executor E of app A: its own calls and app A's objects, never the secret.
 *
 * Keys are derived, not stored, so a restarted head (same secret) recognises
 * the warm executors its agents report.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createHmac, randomBytes } from "node:crypto";
import os from "node:os";
import path from "node:path";
import { AuthError } from "./errors.js";

/** A peer's role, bound at the handshake (never read from a routing id). */
export type Role = "admin" | "driver" | "agent" | "executor";

/** What a peer proves at the handshake: a role, an identity and the key derived for them. */
export interface Credential {
  role: Role;
  /** The agent id, the executor id, or for a driver or admin the app it opens. */
  id: string;
  /** The app of a driver or executor ("" for admin and agents). */
  app: string;
  key: Buffer;
}

/** Names the cluster secret file explicitly (Slurm jobs get it; executors never do). */
export const SECRET_FILE_ENV = "HEARTH_SECRET_FILE";
/** A driver's app token (hex), for a driver that is given one app and not the secret. */
export const APP_TOKEN_ENV = "HEARTH_APP_TOKEN";
/** An executor's own credential (hex), set by its agent. */
export const EXECUTOR_TOKEN_ENV = "HEARTH_EXECUTOR_TOKEN";

/** The state folder: `home`, else HEARTH_HOME, else ~/.hearth. */
export function hearthHome(home?: string): string {
  return home ?? process.env.HEARTH_HOME ?? path.join(os.homedir(), ".hearth");
}

/** Where the cluster secret lives: HEARTH_SECRET_FILE, else <home>/secret. */
export function secretFile(home?: string, env: NodeJS.ProcessEnv = process.env): string {
  return home === undefined && env[SECRET_FILE_ENV] ? env[SECRET_FILE_ENV]! : path.join(hearthHome(home), "secret");
}

/** Reads a secret file; a clear error when it is missing, malformed or readable by others. */
export function loadSecret(file: string): Buffer {
  if (!existsSync(file)) {
    throw new AuthError(
      `no cluster secret at ${file}: the head makes it under its HEARTH_HOME on first start; ` +
        `point HEARTH_HOME (or HEARTH_SECRET_FILE) at it, or give the driver an app token (HEARTH_APP_TOKEN)`,
    );
  }
  const mode = statSync(file).mode & 0o777;
  if ((mode & 0o077) !== 0) throw new AuthError(`the cluster secret ${file} has mode 0${mode.toString(8)}; others can read it. Run: chmod 600 ${file}`);
  const text = readFileSync(file, "utf8").trim();
  if (!/^[0-9a-f]{64}$/.test(text)) throw new AuthError(`the cluster secret ${file} is not 64 hex digits; delete it to make a new one (every peer then needs the new one)`);
  return Buffer.from(text, "hex");
}

/**
 * Loads the secret of the cluster at `file`, making it on first use: its
 * folder becomes 0700 and the file 0600 (created exclusively, so two starting
 * processes agree on one secret).
 */
export function ensureSecret(file: string): Buffer {
  const dir = path.dirname(file);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  if (!existsSync(file)) {
    try {
      writeFileSync(file, `${randomBytes(32).toString("hex")}\n`, { mode: 0o600, flag: "wx" });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
  return loadSecret(file);
}

const hmac = (key: Buffer, text: string): Buffer => createHmac("sha256", key).update(text).digest();

/** The key of one role and identity, derived from the cluster secret. */
export function deriveKey(secret: Buffer, role: Role, id: string, app: string): Buffer {
  switch (role) {
    case "admin":
      return hmac(secret, "hearth/admin");
    case "agent":
      return hmac(secret, "hearth/agent");
    case "driver":
      return hmac(secret, `hearth/app\0${app}`);
    case "executor":
      return hmac(secret, `hearth/executor\0${app}\0${id}`);
  }
}

/**
 * The key a gang's members sign their rendezvous with (torch's TCPStore does
 * not authenticate; the engine's rendezvous.py signs every value). Each agent
 * of a member derives it from the cluster secret, so it never travels; it is
 * bound to the app, the gang's service id and its reserved port.
 */
export function rendezvousKey(secret: Buffer, app: string, serviceId: string, port: number): Buffer {
  return hmac(secret, `hearth/rendezvous\0${app}\0${serviceId}\0${port}`);
}

/** A credential made from the secret. */
export function credentialFrom(secret: Buffer, role: Role, id: string, app = ""): Credential {
  return { role, id, app, key: deriveKey(secret, role, id, app) };
}

/** The app token a driver of `app` proves (give it to someone to share one app, not the cluster). */
export function appToken(secret: Buffer, app: string): string {
  return deriveKey(secret, "driver", app, app).toString("hex");
}

/**
 * A driver's credential for `app`: admin when asked (needs the secret), else
 * HEARTH_APP_TOKEN if set, else derived from the secret under `home`
 * (HEARTH_HOME). The token wins over a home that holds a secret: a
 * provisioner always names its HEARTH_HOME, and a user who set a token
 * means to act with that app's rights only.
 */
export function driverCredential(app: string, opts: { home?: string; admin?: boolean; env?: NodeJS.ProcessEnv } = {}): Credential {
  const env = opts.env ?? process.env;
  if (opts.admin) return credentialFrom(loadSecret(secretFile(opts.home, env)), "admin", app);
  const token = env[APP_TOKEN_ENV];
  if (token) {
    if (!/^[0-9a-f]{64}$/.test(token)) throw new AuthError(`${APP_TOKEN_ENV} must be 64 hex digits (an app token from appToken()); got ${token.length} characters`);
    return { role: "driver", id: app, app, key: Buffer.from(token, "hex") };
  }
  return credentialFrom(loadSecret(secretFile(opts.home, env)), "driver", app, app);
}

/** The MAC a peer sends for a server nonce: binds role, identity, app and its routing id. */
export function authMac(key: Buffer, nonce: Buffer, routingId: Buffer, role: string, id: string, app: string): Buffer {
  return createHmac("sha256", key).update(`hearth-auth-v1\0${role}\0${id}\0${app}\0`).update(nonce).update(routingId).digest();
}
