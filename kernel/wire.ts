/**
 * The Jupyter wire format: connection files, message headers, and the
 * multipart frames `[ids…, "<IDS|MSG>", signature, header, parent_header,
 * metadata, content, buffers…]` signed with HMAC over the four JSON frames.
 *
 * Spec: https://jupyter-client.readthedocs.io/en/stable/messaging.html#the-wire-protocol
 */
import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";

/** The protocol version this kernel speaks. */
export const PROTOCOL_VERSION = "5.3";

const DELIMITER = Buffer.from("<IDS|MSG>");

/** The JSON connection file a Jupyter client writes and passes to the kernel. */
export interface ConnectionInfo {
  transport: "tcp" | "ipc";
  ip: string;
  shell_port: number;
  iopub_port: number;
  stdin_port: number;
  control_port: number;
  hb_port: number;
  key: string;
  signature_scheme: string;
  kernel_name?: string;
}

/** A message header; `msg_type` selects the content schema. */
export interface MessageHeader {
  msg_id: string;
  session: string;
  username: string;
  date: string;
  msg_type: string;
  version: string;
}

/** A parsed message. `ids` are the ROUTER routing identities to reply to. */
export interface JupyterMessage<C = Record<string, unknown>> {
  ids: Buffer[];
  header: MessageHeader;
  parent_header: MessageHeader | Record<string, never>;
  metadata: Record<string, unknown>;
  content: C;
  buffers: Buffer[];
}

/** A message failed to parse or its signature did not match. */
export class WireError extends Error {
  override name = "WireError";
}

/** Reads and validates a connection file. */
export function readConnectionFile(path: string): ConnectionInfo {
  const info = JSON.parse(readFileSync(path, "utf8")) as ConnectionInfo;
  for (const k of ["shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"] as const) {
    if (typeof info[k] !== "number") throw new WireError(`connection file ${path}: ${k} is not a number`);
  }
  if (info.signature_scheme && info.key && info.signature_scheme !== "hmac-sha256") {
    throw new WireError(`connection file ${path}: unsupported signature_scheme ${info.signature_scheme} (only hmac-sha256)`);
  }
  return info;
}

/** Signs and verifies the four JSON frames with the connection key (empty key: no signing, per the spec). */
export class Signer {
  private readonly key: string;

  constructor(key: string) {
    this.key = key;
  }

  /** Hex HMAC-SHA256 of the frames, or "" when there is no key. */
  sign(frames: Buffer[]): string {
    if (this.key === "") return "";
    const h = createHmac("sha256", this.key);
    for (const f of frames) h.update(f);
    return h.digest("hex");
  }

  /** Constant-time comparison of a received signature against the frames. */
  verify(signature: string, frames: Buffer[]): boolean {
    if (this.key === "") return true;
    const expected = Buffer.from(this.sign(frames));
    const got = Buffer.from(signature);
    return got.length === expected.length && timingSafeEqual(got, expected);
  }
}

/** Splits, verifies and decodes raw multipart frames. Throws WireError on a bad message. */
export function parseMessage(frames: Buffer[], signer: Signer): JupyterMessage {
  const at = frames.findIndex((f) => f.equals(DELIMITER));
  if (at < 0 || frames.length < at + 6) throw new WireError(`malformed message: ${frames.length} frames, delimiter at ${at}`);
  const signature = frames[at + 1]!.toString();
  const json = frames.slice(at + 2, at + 6);
  if (!signer.verify(signature, json)) throw new WireError("invalid message signature");
  const [header, parent, metadata, content] = json.map((f) => JSON.parse(f.toString() || "{}") as unknown);
  return {
    ids: frames.slice(0, at),
    header: header as MessageHeader,
    parent_header: parent as MessageHeader,
    metadata: metadata as Record<string, unknown>,
    content: content as Record<string, unknown>,
    buffers: frames.slice(at + 6),
  };
}

/** Encodes a message into signed frames, routing ids first. */
export function serializeMessage(msg: JupyterMessage<unknown>, signer: Signer): Buffer[] {
  const json = [msg.header, msg.parent_header, msg.metadata, msg.content].map((o) => Buffer.from(JSON.stringify(o)));
  return [...msg.ids, DELIMITER, Buffer.from(signer.sign(json)), ...json, ...msg.buffers];
}

/** A fresh header of type `msgType` in `session`. */
export function newHeader(msgType: string, session: string): MessageHeader {
  return { msg_id: randomUUID(), session, username: "hearth", date: new Date().toISOString(), msg_type: msgType, version: PROTOCOL_VERSION };
}

/** A message of type `msgType` answering (or caused by) `parent`, addressed to the parent's routing ids. */
export function replyTo<C>(parent: JupyterMessage<unknown> | null, msgType: string, content: C, session: string, ids?: Buffer[]): JupyterMessage<C> {
  return {
    ids: ids ?? parent?.ids ?? [],
    header: newHeader(msgType, session),
    parent_header: parent?.header ?? {},
    metadata: {},
    content,
    buffers: [],
  };
}
