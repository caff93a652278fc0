/**
 * ZeroMQ CURVE for the head's socket: the head is a CURVE server and lets in
 * only clients whose public key it was given (its gate, zap.ts); drivers,
 * agents and executors are CURVE clients. One key file
 * (JSON, mode 0600) holds the head's key pair and the client key pair every
 * hearth process of the app uses; whoever can read it can join.
 * `HEARTH_CURVE_KEYS=<file>` turns CURVE on for every client socket to the head.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { capability, curveKeyPair } from "zeromq";
import { HearthError } from "../errors/index.js";

/** Z85 keys (40 characters each). */
export interface CurveKeys {
  serverPublicKey: string;
  serverSecretKey: string;
  publicKey: string;
  secretKey: string;
}

/** What a client socket needs: the head's public key and its own pair. */
export type CurveClientKeys = Pick<CurveKeys, "serverPublicKey" | "publicKey" | "secretKey">;

/** The environment variable naming the key file. */
export const CURVE_KEYS_ENV = "HEARTH_CURVE_KEYS";

const Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/** Decodes a Z85 string (length a multiple of 5) to bytes. */
export function z85Decode(text: string): Buffer {
  if (text.length % 5 !== 0) throw new HearthError(`a Z85 key has a length that is a multiple of 5; got ${text.length}`);
  const out = Buffer.alloc((text.length / 5) * 4);
  for (let i = 0; i < text.length; i += 5) {
    let v = 0;
    for (let j = 0; j < 5; j++) {
      const d = Z85.indexOf(text[i + j]!);
      if (d < 0) throw new HearthError(`'${text[i + j]}' is not a Z85 character`);
      v = v * 85 + d;
    }
    out.writeUInt32BE(v >>> 0, (i / 5) * 4);
  }
  return out;
}

function requireCurve(): void {
  if (!capability.curve) throw new HearthError("this zeromq build has no CURVE support (zmq.capability.curve is false)");
}

/** Reads a key file written by `ensureCurveKeys`. */
export function loadCurveKeys(file: string): CurveKeys {
  const k = JSON.parse(readFileSync(file, "utf8")) as Partial<CurveKeys>;
  for (const f of ["serverPublicKey", "serverSecretKey", "publicKey", "secretKey"] as const) {
    if (typeof k[f] !== "string" || k[f]!.length !== 40) throw new HearthError(`CURVE key file ${file}: '${f}' must be a 40-character Z85 key`);
  }
  return k as CurveKeys;
}

/** Loads the key file, generating it (mode 0600) on first use. */
export function ensureCurveKeys(file: string): CurveKeys {
  if (existsSync(file)) return loadCurveKeys(file);
  requireCurve();
  const server = curveKeyPair();
  const client = curveKeyPair();
  const keys: CurveKeys = { serverPublicKey: server.publicKey, serverSecretKey: server.secretKey, publicKey: client.publicKey, secretKey: client.secretKey };
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  writeFileSync(file, JSON.stringify(keys, null, 2), { mode: 0o600, flag: "wx" });
  chmodSync(file, 0o600);
  return keys;
}

/**
 * The client keys by value (JSON of `CurveClientKeys`): what an agent hands its executors, which may not
 * be able to read the key file (another user) and need not see the head's secret key in it.
 */
export const CURVE_CLIENT_ENV = "HEARTH_CURVE_CLIENT";

/** The client keys of HEARTH_CURVE_CLIENT, else of the file HEARTH_CURVE_KEYS names, or undefined when CURVE is off. */
export function curveClientFromEnv(env: NodeJS.ProcessEnv = process.env): CurveClientKeys | undefined {
  const given = env[CURVE_CLIENT_ENV];
  if (given) {
    const k = JSON.parse(given) as Partial<CurveClientKeys>;
    for (const f of ["serverPublicKey", "publicKey", "secretKey"] as const) {
      if (typeof k[f] !== "string" || k[f]!.length !== 40) throw new HearthError(`${CURVE_CLIENT_ENV}: '${f}' must be a 40-character Z85 key`);
    }
    return { serverPublicKey: k.serverPublicKey!, publicKey: k.publicKey!, secretKey: k.secretKey! };
  }
  const file = env[CURVE_KEYS_ENV];
  if (!file) return undefined;
  const { serverPublicKey, publicKey, secretKey } = loadCurveKeys(file);
  return { serverPublicKey, publicKey, secretKey };
}

/**
 * The CURVE half of a ROUTER's gate (zap.ts): a client whose public key is
 * in `allowed` may connect; any other, or a client that is not a CURVE one,
 * is refused (the returned check gives the reason).
 */
export function curveGate(allowed: string[]): (mechanism: string, key: Buffer | undefined) => string | undefined {
  requireCurve();
  const keys = allowed.map(z85Decode);
  return (mechanism, key) => {
    if (mechanism !== "CURVE") return `a ${mechanism} client where CURVE is required`;
    return key !== undefined && keys.some((k) => k.equals(key)) ? undefined : "an unknown CURVE key";
  };
}
