/**
 * Moving object bytes. Small objects ride in one message; large ones are
 * streamed in chunks that the receiver pulls with a few requests in flight,
 * so no frame ever holds a whole object and a slow reader never stalls the
 * head for others. Neither side needs the object whole: an upload reads its
 * chunks from a source (a buffer, a file, a stream), a download hands each
 * chunk to a sink (a buffer, a file, an ordered stream) as it arrives.
 */
import { open } from "node:fs/promises";
import path from "node:path";
import type { Reply, Requester } from "../wire/requests.js";
import { HearthError } from "../errors/index.js";
import { allocObjectBuffer } from "./buffers.js";
import { CHUNK, checkChunk, chunkSum } from "./file-io.js";
import type { DType, EncodedValue, ValueKind } from "./values.js";

export { CHUNK };
/** Objects up to this size travel in one message (and parts up to it stay in memory). */
export const INLINE_LIMIT = 1024 * 1024;
/** Chunk requests in flight per transfer. */
export const WINDOW = 4;

/**
 * Tokens of object replies this process has read and not yet handed back,
 * per requester. The head and agents let a connection hold only so much
 * object data it has not acknowledged reading (cluster-agent/read-credit.ts);
 * each reply with data carries a token (`ack`), and handing it back on the
 * next request (`acks`), or in an `obj-ack` soon after the last one, is what
 * says it was read.
 */
interface Owed {
  acks: number[];
  timer?: NodeJS.Timeout;
}
const owed = new WeakMap<Requester, Owed>();
/** How soon read tokens go back when no request carries them. */
const ACK_DELAY_MS = 20;

/** Notes the token of a reply just read. */
export function noteRead(req: Requester, value: { ack?: unknown }): void {
  if (typeof value.ack !== "number") return;
  let o = owed.get(req);
  if (!o) owed.set(req, (o = { acks: [] }));
  o.acks.push(value.ack);
}

/** The tokens to hand back on the next request (taken: each goes back once). */
function acksFor(req: Requester): { acks?: number[] } {
  const o = owed.get(req);
  if (!o || o.acks.length === 0) return {};
  clearTimeout(o.timer);
  o.timer = undefined;
  return { acks: o.acks.splice(0) };
}

/**
 * Sends an object request carrying the tokens owed. If it fails the tokens are
 * owed again (the head ignores a token it already took), so a lost request
 * never leaves its connection charged for data it did read.
 */
export async function requestAcking(req: Requester, op: string, fields: Record<string, unknown>, timeoutMs?: number | null): Promise<Reply> {
  const owedNow = acksFor(req);
  try {
    return await req.request(op, { ...fields, ...owedNow }, [], timeoutMs);
  } catch (err) {
    if (owedNow.acks) {
      for (const t of owedNow.acks) noteRead(req, { ack: t });
      ackSoon(req);
    }
    throw err;
  }
}

/** Hands back what is still owed shortly, unless a request carries it first. */
export function ackSoon(req: Requester): void {
  const o = owed.get(req);
  if (!o || o.acks.length === 0 || o.timer) return;
  o.timer = setTimeout(() => {
    o.timer = undefined;
    if (o.acks.length > 0) requestAcking(req, "obj-ack", {}).catch(() => undefined);
  }, ACK_DELAY_MS);
  o.timer.unref?.();
}

/** A part as announced: the base or a patch, without its bytes. */
export interface PartMeta {
  kind: ValueKind;
  dtype?: DType;
  size: number;
  version: number;
  /** CRC-32 of each CHUNK of the part as it was written (file-io.ts): every chunk read is checked against them. */
  sums?: number[];
}

/** A part as it arrived: its bytes in memory when it went to a buffer sink. */
export interface ReceivedPart extends PartMeta {
  data?: Buffer;
}

/** Where one part's bytes go as they arrive (chunks may come in any order inside a window). */
export interface PartSink {
  write(chunk: Buffer, offset: number): void | Promise<void>;
  /** Every byte of the part arrived. */
  end(): void | Promise<void>;
  /** The transfer failed: drop what was written. */
  abort(err: unknown): void | Promise<void>;
  /** The part's bytes in memory, for a buffer sink (read after end). */
  readonly data?: Buffer;
}

/** Chooses the sink of each part (index in the reply's order); undefined: a buffer. */
export type SinkFor = (part: PartMeta, index: number) => PartSink | undefined;

/** A sink that assembles a part in one buffer (under this process's buffer limit, buffers.ts). */
export function bufferSink(part: PartMeta, what: { key: string; app?: string }): PartSink {
  const data = allocObjectBuffer(part.size, what);
  return {
    data,
    write: (chunk, offset) => void chunk.copy(data, offset),
    end: () => undefined,
    abort: () => undefined,
  };
}

/** The answer to an incremental get. */
export interface Download {
  mode: "not-modified" | "patches" | "full";
  version: number;
  baseVersion: number;
  parts: ReceivedPart[];
  /** Object bytes that crossed the wire for this get. */
  bytes: number;
}

/** The fields of an incremental get. */
export interface DownloadFields {
  key: string;
  have?: number;
  haveBase?: number;
  /** The app the object belongs to (an agent reading for one of its apps names it). */
  app?: string;
  [extra: string]: unknown;
}

/**
 * Fetches `key` relative to the version held (if any). Each part goes to the
 * sink `sinkFor` gives it (default: a buffer under this process's limit); a
 * failure aborts every sink and rethrows.
 */
export async function download(req: Requester, fields: DownloadFields, sinkFor?: SinkFor): Promise<Download> {
  const { value: head, frames } = await requestAcking(req, "obj-get", fields);
  noteRead(req, head);
  const metas = head.parts as PartMeta[];
  if (head.mode === "not-modified") {
    ackSoon(req);
    return { mode: "not-modified", version: head.version, baseVersion: head.baseVersion, parts: [], bytes: 0 };
  }
  const what = { key: fields.key, app: fields.app };
  const sinks: PartSink[] = [];
  let bytes = 0;
  try {
    for (const [i, m] of metas.entries()) sinks.push(sinkFor?.(m, i) ?? bufferSink(m, what));
    if (head.tid === undefined) {
      for (const [i, s] of sinks.entries()) {
        const f = frames[i] ?? Buffer.alloc(0);
        if (f.byteLength > 0) await s.write(f, 0);
        bytes += f.byteLength;
      }
    } else {
      bytes = await pullChunks(req, head.tid as number, metas, sinks, { app: fields.app, key: fields.key });
    }
    for (const s of sinks) await s.end();
  } catch (err) {
    for (const s of sinks) await s.abort(err);
    throw err;
  }
  ackSoon(req);
  return {
    mode: head.mode,
    version: head.version,
    baseVersion: head.baseVersion,
    parts: metas.map((m, i) => ({ ...m, ...(sinks[i]?.data ? { data: sinks[i]!.data } : {}) })),
    bytes,
  };
}

/** Options of pullChunks. */
export interface PullOptions {
  /** The app the transfer belongs to (an agent reading for one of its apps names it). */
  app?: string;
  /** Chunks already there (a copy resumed from another source). */
  skip?: (part: number, offset: number) => boolean;
  /** The object's key, for errors. */
  key?: string;
  /** Deadline of each chunk request (default the requester's). */
  timeoutMs?: number;
}

/**
 * Pulls every chunk of read transfer `tid` into the sinks (WINDOW in flight),
 * except those `skip` says are already there, then ends the transfer;
 * returns the bytes pulled. Each chunk is checked against its part's sums
 * before a sink sees it (ObjectCorruptError: nothing of it is written).
 * `key` names the object in that error.
 */
export async function pullChunks(req: Requester, tid: number, metas: readonly PartMeta[], sinks: readonly PartSink[], opts: PullOptions = {}): Promise<number> {
  const { app, skip, key = "?", timeoutMs } = opts;
  // A transfer belongs to the app that opened it: an agent reading for an app names it on every request.
  const named = app === undefined ? {} : { app };
  const jobs: Array<{ part: number; offset: number; length: number }> = [];
  metas.forEach((p, part) => {
    for (let offset = 0; offset < p.size; offset += CHUNK) if (!skip?.(part, offset)) jobs.push({ part, offset, length: Math.min(CHUNK, p.size - offset) });
  });
  let bytes = 0;
  try {
    await inWindow(jobs, async (job) => {
      const r = await requestAcking(req, "obj-read", { tid, ...job, ...named }, timeoutMs);
      noteRead(req, r.value);
      const chunk = r.frames[0];
      if (!chunk || chunk.byteLength !== job.length) throw new HearthError(`a chunk of ${job.length} bytes at ${job.offset} of part ${job.part} arrived with ${chunk?.byteLength ?? 0}`);
      checkChunk(chunk, job.offset, metas[job.part]!.sums, { key, app, part: job.part, source: "the copy it came from" });
      await sinks[job.part]!.write(chunk, job.offset);
      bytes += chunk.byteLength;
    });
  } finally {
    // Not awaited: ending the transfer is the server's bookkeeping (it also expires idle ones), and a
    // peer that died would hold this caller for a request deadline.
    requestAcking(req, "obj-done", { tid, ...named }).catch(() => undefined);
  }
  return bytes;
}

/** What a write returns. */
export interface WriteResult {
  key: string;
  version: number;
  baseVersion: number;
  size: number;
}

/** The bytes of one part to write, read a chunk at a time: a buffer, a file (random access), or a stream of unknown length. */
export type PartSource =
  | { kind: ValueKind; dtype?: DType; data: Buffer }
  | { kind: ValueKind; dtype?: DType; size: number; read(offset: number, length: number): Promise<Buffer>; close?(): Promise<void> | void; /** The file it reads, when it is handed over whole (the writer's node may keep it as its copy). */ file?: string }
  | { kind: ValueKind; dtype?: DType; chunks: AsyncIterable<Uint8Array> };

/** What a write sends: one part, or (a base) several parts in order, each opened when its turn comes. */
export type UploadSource = PartSource | { kind: ValueKind; dtype?: DType; parts: AsyncIterable<PartSource> };

/**
 * An upload source reading `file`, or `range.length` bytes of it from
 * `range.offset` (its size taken now; a file that shrinks while it is read
 * fails the write). With `handOver` (the whole file only) it names the file,
 * which the writer's node may keep once sent (fromFile).
 */
export async function fileSource(file: string, range: { offset?: number; length?: number; handOver?: boolean } = {}, kind: ValueKind = "bytes"): Promise<PartSource> {
  const fh = await open(file, "r");
  const start = range.offset ?? 0;
  const size = range.length ?? (await fh.stat()).size - start;
  return {
    kind,
    size,
    ...(range.handOver === true && range.offset === undefined && range.length === undefined ? { file: path.resolve(file) } : {}),
    read: async (offset, length) => {
      const buf = Buffer.allocUnsafe(length);
      let got = 0;
      while (got < length) {
        const { bytesRead } = await fh.read(buf, got, length - got, start + offset + got);
        if (bytesRead === 0) throw new HearthError(`${file} shrank while it was being written to the cache (expected ${size} bytes)`);
        got += bytesRead;
      }
      return buf;
    },
    close: () => fh.close(),
  };
}

/** One part of an upload that reached the head whole: its size, its chunk sums (the head checked each), and its file when it was read from one whole. */
export interface SentPart {
  size: number;
  sums: number[];
  file?: string;
}

/**
 * Writes one value (`put` creates, `update` replaces the base, `patch`
 * appends) from a buffer, a file, a stream, or several parts (a base of
 * shards: each part goes as it comes, so a producer can still be writing
 * the next one). The write commits only once every part arrived.
 * `onPartSent` is told of each part of a chunked upload once the head has
 * every chunk of it, before the next part is asked for (a file part's file
 * is still there: the writer's node may keep it).
 */
export async function upload(
  req: Requester,
  op: "put" | "update" | "patch",
  key: string | undefined,
  value: EncodedValue | UploadSource,
  opts: { ifVersion?: number; pin?: boolean; scratch?: boolean; onPartSent?: (part: number, sent: SentPart) => Promise<void> },
): Promise<WriteResult> {
  const base = { write: op, key, kind: value.kind, dtype: value.dtype, ifVersion: opts.ifVersion, pin: opts.pin, scratch: opts.scratch };
  if ("data" in value && value.data.byteLength <= INLINE_LIMIT) return (await req.request<WriteResult>("obj-write", { ...base, size: value.data.byteLength }, [value.data])).value;
  const known = "data" in value ? value.data.byteLength : "size" in value ? value.size : undefined;
  const { value: begun } = await req.request<{ tid: number }>("obj-begin", { ...base, size: known });
  const tid = begun.tid;
  try {
    const sizes: number[] = [];
    const send = async (part: PartSource): Promise<void> => {
      const sent = await sendPart(req, tid, sizes.length, part);
      // A large part whole at the head: nodes holding the object may copy it while the next one uploads (invisible until the commit).
      if (sent.size > INLINE_LIMIT) await req.request("obj-seal", { tid, part: sizes.length, size: sent.size });
      await opts.onPartSent?.(sizes.length, sent);
      sizes.push(sent.size);
    };
    if ("parts" in value) {
      for await (const part of value.parts) await send(part);
      if (sizes.length === 0) throw new HearthError("a write of parts gave none; a base has at least one");
    } else await send(value);
    return (await req.request<WriteResult>("obj-commit", { tid, sizes }, [], 120_000)).value;
  } catch (err) {
    // The head would drop it after its idle time; saying so frees its files now.
    req.request("obj-abort", { tid }).catch(() => undefined);
    throw err;
  }
}

/** Sends one part's chunks (WINDOW in flight); returns its size and sums. The source is closed after. */
async function sendPart(req: Requester, tid: number, part: number, source: PartSource): Promise<SentPart> {
  try {
    if ("chunks" in source) return await sendStream(req, tid, part, source.chunks);
    const size = "data" in source ? source.data.byteLength : source.size;
    const read = "data" in source ? async (o: number, l: number) => source.data.subarray(o, o + l) : source.read;
    const jobs: number[] = [];
    const sums: number[] = [];
    for (let offset = 0; offset < size; offset += CHUNK) jobs.push(offset);
    await inWindow(jobs, async (offset) => {
      const chunk = await read(offset, Math.min(CHUNK, size - offset));
      // The sum travels with the chunk: the head checks what it received and records it for every later reader.
      const crc = chunkSum(chunk);
      sums[offset / CHUNK] = crc;
      await req.request("obj-chunk", { tid, offset, part, crc }, [chunk]);
    });
    return { size, sums, ...("file" in source && source.file ? { file: source.file } : {}) };
  } finally {
    if ("close" in source && source.close) await source.close();
  }
}

/** Sends a stream as CHUNK-sized chunks in order, WINDOW in flight (so at most WINDOW + 1 chunks are held); returns its length and sums. */
async function sendStream(req: Requester, tid: number, part: number, chunks: AsyncIterable<Uint8Array>): Promise<SentPart> {
  const sums: number[] = [];
  const inFlight = new Set<Promise<unknown>>();
  let failed: unknown;
  let offset = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const send = async (chunk: Buffer): Promise<void> => {
    while (inFlight.size >= WINDOW) await Promise.race(inFlight);
    if (failed !== undefined) throw failed;
    const crc = chunkSum(chunk);
    sums.push(crc);
    const p = req.request("obj-chunk", { tid, offset, part, crc }, [chunk]).catch((err: unknown) => {
      failed ??= err;
    });
    offset += chunk.byteLength;
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };
  for await (const piece of chunks) {
    let buf = Buffer.isBuffer(piece) ? piece : Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength);
    while (pendingBytes + buf.byteLength >= CHUNK) {
      const take = CHUNK - pendingBytes;
      pending.push(buf.subarray(0, take));
      await send(pending.length === 1 ? pending[0]! : Buffer.concat(pending));
      buf = buf.subarray(take);
      pending = [];
      pendingBytes = 0;
    }
    if (buf.byteLength > 0) {
      pending.push(Buffer.from(buf)); // the producer may reuse its buffer
      pendingBytes += buf.byteLength;
    }
  }
  if (pendingBytes > 0) await send(Buffer.concat(pending));
  await Promise.all(inFlight);
  if (failed !== undefined) throw failed;
  return { size: offset, sums };
}

/** Runs `work` over `jobs` with at most WINDOW in flight; the first failure stops the rest. */
export async function inWindow<J>(jobs: J[], work: (job: J) => Promise<void>, window = WINDOW): Promise<void> {
  let next = 0;
  let failed = false;
  const lanes = Array.from({ length: Math.min(window, jobs.length) }, async () => {
    while (!failed && next < jobs.length) {
      try {
        await work(jobs[next++]!);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  });
  await Promise.all(lanes);
}
