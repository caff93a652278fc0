/**
 * The server side of the object protocol (`obj-*` requests), shared by the
 * head (the authoritative store) and agents (node-local read caches). It
 * answers incremental gets inline or through pulled chunks, and accepts
 * inline or chunked writes.
 */
import { randomUUID } from "node:crypto";
import { CHUNK, INLINE_LIMIT } from "../sdk/cache/transfer.js";
import type { DType, ValueKind } from "../sdk/cache/values.js";
import { num, optNum, optStr, str, type Header } from "../sdk/wire/codec.js";
import { HearthError } from "../sdk/errors/index.js";
import { ProtocolError } from "../sdk/wire/errors.js";
import type { ObjectStore, StoredObject, StoredPart, WriteOp } from "./head/object-store.js";
import { ReadCredit, type ReadCreditLimits } from "./read-credit.js";

/** A reply: value plus payload frames. */
export interface ServiceReply {
  value: unknown;
  frames?: Buffer[];
}

interface ReadTransfer {
  /** The app namespace that opened it: only that app's peers may read or end it. */
  ns: string;
  parts: StoredPart[];
  object: StoredObject;
  lastActive: number;
}

interface WriteTransfer {
  /** The app namespace that opened it: only that app's peers may add to, commit or see it. */
  ns: string;
  op: WriteOp;
  key: string;
  kind: ValueKind;
  dtype?: DType;
  ifVersion?: number;
  pin?: boolean;
  scratch?: boolean;
  buf: Buffer;
  /** Bytes of distinct chunks received. */
  received: number;
  /** Offsets of the chunks received. */
  chunks: Set<number>;
  lastActive: number;
}

const TRANSFER_TTL_MS = 120_000;
const KINDS = new Set(["bytes", "typed", "msgpack"]);

/** Byte counters of one service. */
export interface ObjectTraffic {
  bytesIn: number;
  bytesOut: number;
  /** Bytes sent, by peer kind ("driver", "agent", "executor"). */
  bytesOutTo: Record<string, number>;
  gets: { notModified: number; patches: number; full: number };
}

/** Handles `obj-*` requests against one store. */
export class ObjectService {
  private readonly reads = new Map<number, ReadTransfer>();
  private readonly writes = new Map<number, WriteTransfer>();
  private nextTid = 1;
  readonly traffic: ObjectTraffic = { bytesIn: 0, bytesOut: 0, bytesOutTo: {}, gets: { notModified: 0, patches: 0, full: 0 } };

  /** How much object data each connection holds unread (read-credit.ts). */
  readonly credit: ReadCredit;

  /**
   * @param opts.onDropped told of every delete that removed objects (`prefix`
   * within app `ns`; "" when the app was released): the head passes it on to
   * the agents, whose node caches drop their copies.
   */
  constructor(
    readonly store: ObjectStore,
    private readonly opts: { readOnly?: boolean; credit?: Partial<ReadCreditLimits>; onDropped?: (ns: string, prefix: string) => void } = {},
  ) {
    this.credit = new ReadCredit(opts.credit);
  }

  /**
   * Answers one request from connection `conn` (its routing id) with flow
   * control: the acknowledgements it carries (`acks`) are taken first; a
   * reply with object data waits while `conn` holds more unread data than
   * its limit, and carries the token (`ack`) that acknowledges it.
   */
  async serve(op: string, ns: string, h: Header, frames: Buffer[], peer: string, conn: string): Promise<ServiceReply> {
    this.credit.acknowledge(conn, h.acks);
    if (op === "obj-ack") return { value: {} };
    const r = this.handle(op, ns, h, frames, peer);
    let bytes = 0;
    for (const f of r.frames ?? []) bytes += f.byteLength;
    if (bytes === 0) return r;
    const ack = await this.credit.admit(conn, bytes);
    return { value: { ...(r.value as object), ack }, frames: r.frames };
  }

  /**
   * Answers one request. `ns` is the app namespace of the caller; `peer`
   * names the caller's kind for the traffic counters.
   */
  handle(op: string, ns: string, h: Header, frames: Buffer[], peer: string): ServiceReply {
    switch (op) {
      case "obj-get":
        return this.get(ns, h, peer);
      case "obj-read":
        return this.read(ns, h, peer);
      case "obj-done": {
        const tid = num(h, "tid");
        if (this.reads.get(tid)?.ns === ns) this.finishRead(tid);
        return { value: { done: true } };
      }
      case "obj-stat":
        return { value: { ...this.store.usage(), traffic: this.traffic, credit: { ...this.credit.stats } } };
    }
    if (this.opts.readOnly) throw new ProtocolError(`'${op}' is not served here: write objects through the head`);
    switch (op) {
      case "obj-write": {
        const w = this.parseWrite(ns, h);
        const data = frames[1];
        if (!data || data.byteLength !== w.size) throw new ProtocolError(`obj-write: expected one payload frame of ${w.size} bytes`);
        this.traffic.bytesIn += data.byteLength;
        return { value: this.commit(w.op, w.key, { kind: w.kind, dtype: w.dtype, data }, w) };
      }
      case "obj-begin": {
        const w = this.parseWrite(ns, h);
        this.store.check(w.op, w.key, w.ifVersion);
        // A new base counts the old one (and its patches) as freed: they go when it commits. Until then
        // the upload buffer sits beside them, so nothing published is lost if the upload fails.
        this.store.makeRoom(w.size, w.key, this.store.freedBy(w.op, w.key));
        const tid = this.nextTid++;
        this.writes.set(tid, { ...w, ns, buf: Buffer.allocUnsafe(w.size), received: 0, chunks: new Set(), lastActive: Date.now() });
        return { value: { tid, chunk: CHUNK } };
      }
      case "obj-chunk": {
        const t = this.writeTransfer(ns, num(h, "tid"));
        const offset = num(h, "offset");
        const data = frames[1];
        if (!data || offset < 0 || offset + data.byteLength > t.buf.byteLength) throw new ProtocolError("obj-chunk: chunk outside the declared size");
        // Chunks are the CHUNK-sized pieces at multiples of CHUNK (the last one shorter). Counting distinct
        // pieces, not bytes, means a resent or overlapping chunk cannot make an upload look complete while
        // part of its buffer (allocated uninitialised) was never written.
        const expected = Math.min(CHUNK, t.buf.byteLength - offset);
        if (offset % CHUNK !== 0 || data.byteLength !== expected) {
          throw new ProtocolError(`obj-chunk: expected ${expected} bytes at a multiple of ${CHUNK} (got ${data.byteLength} at ${offset}); send the object in the chunks obj-begin named`);
        }
        data.copy(t.buf, offset);
        if (!t.chunks.has(offset)) {
          t.chunks.add(offset);
          t.received += data.byteLength;
        }
        t.lastActive = Date.now();
        this.traffic.bytesIn += data.byteLength;
        return { value: { received: t.received } };
      }
      case "obj-commit": {
        const tid = num(h, "tid");
        const t = this.writeTransfer(ns, tid);
        // An incomplete upload stays open: the missing chunks can still be sent and the commit retried.
        if (t.received !== t.buf.byteLength) throw new ProtocolError(`obj-commit: received ${t.received} of ${t.buf.byteLength} bytes; send the missing chunks, then commit again`);
        this.writes.delete(tid);
        return { value: this.commit(t.op, t.key, { kind: t.kind, dtype: t.dtype, data: t.buf }, t) };
      }
      case "obj-delete": {
        const prefix = optStr(h, "prefix") ?? "";
        const deleted = this.store.delete(`${ns}/${prefix}`);
        if (deleted > 0) this.opts.onDropped?.(ns, prefix);
        return { value: { deleted } };
      }
      default:
        throw new ProtocolError(`unknown object op '${op}'`);
    }
  }

  /**
   * App `ns` was released (closed, or its keep-alive ran out): its scratch
   * objects go (what its sessions made and no one documents), and node
   * caches drop every copy of its objects. Returns how many were deleted.
   */
  releaseApp(ns: string): number {
    const deleted = this.store.delete(`${ns}/`, { scratchOnly: true });
    this.opts.onDropped?.(ns, "");
    return deleted;
  }

  private commit(op: WriteOp, key: string, value: { kind: ValueKind; dtype?: DType; data: Buffer }, o: { ifVersion?: number; pin?: boolean; scratch?: boolean }): unknown {
    const obj = this.store.write(op, key, value, { ifVersion: o.ifVersion, pin: o.pin, scratch: o.scratch });
    return { key: key.slice(key.indexOf("/") + 1), version: obj.version, baseVersion: obj.baseVersion, size: totalSize(obj) };
  }

  private parseWrite(ns: string, h: Header): { op: WriteOp; key: string; kind: ValueKind; dtype?: DType; size: number; ifVersion?: number; pin?: boolean; scratch?: boolean } {
    const op = str(h, "write");
    if (op !== "put" && op !== "update" && op !== "patch") throw new ProtocolError(`object write must be put, update or patch; got '${op}'`);
    const given = optStr(h, "key");
    if (given !== undefined && (given.length === 0 || given.length > 512 || given.includes("\0"))) {
      throw new HearthError(`object key must be 1-512 characters without NUL; got ${JSON.stringify(given.slice(0, 40))}`);
    }
    if (given === undefined && op !== "put") throw new ProtocolError(`${op} needs a key`);
    const kind = str(h, "kind");
    if (!KINDS.has(kind)) throw new ProtocolError(`object kind must be bytes, typed or msgpack; got '${kind}'`);
    const size = num(h, "size");
    if (!Number.isInteger(size) || size < 0) throw new ProtocolError("object size must be a non-negative integer");
    return {
      op,
      key: `${ns}/${given ?? `obj-${randomUUID()}`}`,
      kind: kind as ValueKind,
      dtype: optStr(h, "dtype") as DType | undefined,
      size,
      ifVersion: optNum(h, "ifVersion"),
      pin: h.pin === true ? true : undefined,
      scratch: h.scratch === true ? true : undefined,
    };
  }

  private get(ns: string, h: Header, peer: string): ServiceReply {
    const r = this.store.read(`${ns}/${str(h, "key")}`, optNum(h, "have"), optNum(h, "haveBase"));
    const base = { mode: r.mode, version: r.version, baseVersion: r.baseVersion };
    if (r.mode === "not-modified") {
      this.traffic.gets.notModified++;
      return { value: { ...base, parts: [] } };
    }
    this.traffic.gets[r.mode === "full" ? "full" : "patches"]++;
    const parts = r.parts.map((p) => ({ kind: p.kind, dtype: p.dtype, size: p.size, version: p.version }));
    const total = r.parts.reduce((n, p) => n + p.size, 0);
    if (total <= INLINE_LIMIT) {
      this.count(total, peer);
      return { value: { ...base, parts }, frames: r.parts.map((p) => p.data!) };
    }
    const tid = this.nextTid++;
    r.object.readers++;
    this.reads.set(tid, { ns, parts: r.parts, object: r.object, lastActive: Date.now() });
    return { value: { ...base, parts, tid } };
  }

  private read(ns: string, h: Header, peer: string): ServiceReply {
    const tid = num(h, "tid");
    const t = this.reads.get(tid);
    // Another app's transfer answers exactly as a missing one: its existence is not revealed either.
    if (!t || t.ns !== ns) throw new ProtocolError(`no read transfer ${tid} in this app (finished, expired after ${TRANSFER_TTL_MS / 1000} s idle, or never opened by this app)`);
    t.lastActive = Date.now();
    const part = t.parts[num(h, "part")];
    const offset = num(h, "offset");
    const length = Math.min(num(h, "length"), CHUNK);
    if (!part || offset < 0 || offset >= part.size) throw new ProtocolError("obj-read: part or offset out of range");
    const chunk = part.data!.subarray(offset, offset + length);
    this.count(chunk.byteLength, peer);
    return { value: {}, frames: [chunk] };
  }

  private count(bytes: number, peer: string): void {
    this.traffic.bytesOut += bytes;
    this.traffic.bytesOutTo[peer] = (this.traffic.bytesOutTo[peer] ?? 0) + bytes;
  }

  private finishRead(tid: number): void {
    const t = this.reads.get(tid);
    if (!t) return;
    this.reads.delete(tid);
    t.object.readers--;
  }

  private writeTransfer(ns: string, tid: number): WriteTransfer {
    const t = this.writes.get(tid);
    if (!t || t.ns !== ns) throw new ProtocolError(`no write transfer ${tid} in this app (committed, expired after ${TRANSFER_TTL_MS / 1000} s idle, or never opened by this app)`);
    return t;
  }

  /** Drops transfers idle for too long (a reader or writer that vanished). */
  expire(now: number): void {
    this.credit.expire(now);
    for (const [tid, t] of this.reads) if (now - t.lastActive > TRANSFER_TTL_MS) this.finishRead(tid);
    for (const [tid, t] of this.writes) if (now - t.lastActive > TRANSFER_TTL_MS) this.writes.delete(tid);
  }
}

/** Bytes of an object's base plus patches. */
export function totalSize(o: StoredObject): number {
  return o.base.size + o.patches.reduce((n, p) => n + p.size, 0);
}
