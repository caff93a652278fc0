/**
 * The wire layer shared by every hearth process: message encoding, socket
 * wrappers, the wire's own errors and the wire form of every error (the
 * domain errors live in sdk/errors/).
 *
 * @example
 * ```ts
 * import { encode, decodeHeader } from "hearth/wire";
 * const frame = encode({ t: "req", rid: 1, op: "status" });
 * decodeHeader(frame).t; // "req"
 * ```
 */
export { MESSAGE_LIMIT, decode, decodeHeader, encode, messageSize, type Header } from "./codec.js";
export { DealerChannel, RouterChannel, type ChannelOptions, type Frames } from "./channel.js";
export {
  APP_TOKEN_ENV,
  EXECUTOR_TOKEN_ENV,
  SECRET_FILE_ENV,
  appToken,
  credentialFrom,
  deriveKey,
  driverCredential,
  ensureSecret,
  hearthHome,
  loadSecret,
  secretFile,
  type Credential,
  type Role,
} from "./auth.js";
export { AUTH_LIMITS, AUTH_MARK, Authenticator, isAuthMessage, type AuthLimits, type AuthenticatorOptions, type Peer } from "./authenticator.js";
export { AuthError, ConnectError, MAX_CAUSE_DEPTH, MessageTooLargeError, ProtocolError, WIRE_ERROR_NAMES, fromWireError, toWireError, type WireError } from "./errors.js";
