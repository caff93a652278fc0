/**
 * The head's notices of a base upload's parts (obj-sealed): each large part
 * whole before the commit, then the commit or the drop.
 */
import { num, str, type Header } from "../sdk/wire/codec.js";
import type { DType, ValueKind } from "../sdk/cache/values.js";
import { ProtocolError } from "../sdk/wire/errors.js";

/** The kinds of value an object may be. */
export const KINDS: ReadonlySet<string> = new Set(["bytes", "typed", "msgpack"]);

/**
 * A part of a base upload the head has whole before the commit: nodes that
 * hold an earlier version may copy it now (node-precopy.ts), and
 * install it if the commit has exactly these bytes. `dropped`: the upload
 * ended without a commit, and what was copied of it goes.
 */
export interface SealNotice {
  key: string;
  upload: number;
  part: number;
  size: number;
  sums: number[];
  kind: ValueKind;
  dtype?: DType;
  dropped?: boolean;
  /** The upload committed as this version: a node that copied its parts installs them now. */
  committed?: number;
}

/** A SealNotice from its message (obj-sealed, from the head). */
export function parseSealNotice(h: Header): SealNotice {
  const sums = Array.isArray(h.sums) ? h.sums : [];
  if (!sums.every((v) => Number.isInteger(v))) throw new ProtocolError("obj-sealed: sums must be integers");
  const kind = str(h, "kind");
  if (!KINDS.has(kind)) throw new ProtocolError(`obj-sealed: kind must be bytes, typed or msgpack; got '${kind}'`);
  return {
    key: str(h, "key"),
    upload: num(h, "upload"),
    part: num(h, "part"),
    size: num(h, "size"),
    sums: sums as number[],
    kind: kind as ValueKind,
    ...(typeof h.dtype === "string" ? { dtype: h.dtype as DType } : {}),
    ...(h.dropped === true ? { dropped: true } : {}),
    ...(typeof h.committed === "number" ? { committed: h.committed } : {}),
  };
}
