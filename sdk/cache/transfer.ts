/**
 * Moving object bytes. Small objects ride in one message; large ones are
 * streamed in chunks that the receiver pulls with a few requests in flight,
 * so a 6 GB object never needs a 6 GB frame and a slow reader never stalls
 * the head for others.
 */
import type { Reply, Requester } from "../wire/requests.js";
import type { DType, EncodedValue, ValueKind } from "./values.js";

/** Objects up to this size travel in one message. */
export const INLINE_LIMIT = 1024 * 1024;
/** Chunk size of streamed transfers. */
export const CHUNK = 8 * 1024 * 1024;
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
function noteRead(req: Requester, value: { ack?: unknown }): void {
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
async function requestAcking(req: Requester, op: string, fields: Record<string, unknown>): Promise<Reply> {
  const owedNow = acksFor(req);
  try {
    return await req.request(op, { ...fields, ...owedNow });
  } catch (err) {
    if (owedNow.acks) {
      for (const t of owedNow.acks) noteRead(req, { ack: t });
      ackSoon(req);
    }
    throw err;
  }
}

/** Hands back what is still owed shortly, unless a request carries it first. */
function ackSoon(req: Requester): void {
  const o = owed.get(req);
  if (!o || o.acks.length === 0 || o.timer) return;
  o.timer = setTimeout(() => {
    o.timer = undefined;
    if (o.acks.length > 0) requestAcking(req, "obj-ack", {}).catch(() => undefined);
  }, ACK_DELAY_MS);
  o.timer.unref?.();
}

/** A part as it arrives: the base or a patch, with its bytes. */
export interface ReceivedPart {
  kind: ValueKind;
  dtype?: DType;
  size: number;
  version: number;
  data: Buffer;
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

/** Fetches `key` relative to the version held (if any). */
export async function download(req: Requester, fields: { key: string; have?: number; haveBase?: number; app?: string }): Promise<Download> {
  const { value: head, frames } = await requestAcking(req, "obj-get", fields);
  noteRead(req, head);
  const metas = head.parts as Array<Omit<ReceivedPart, "data">>;
  if (head.mode === "not-modified") {
    ackSoon(req);
    return { mode: "not-modified", version: head.version, baseVersion: head.baseVersion, parts: [], bytes: 0 };
  }
  let bytes = 0;
  let parts: ReceivedPart[];
  if (head.tid === undefined) {
    parts = metas.map((m, i) => ({ ...m, data: frames[i] ?? Buffer.alloc(0) }));
    bytes = parts.reduce((n, p) => n + p.size, 0);
  } else {
    parts = metas.map((m) => ({ ...m, data: Buffer.allocUnsafe(m.size) }));
    // A transfer belongs to the app that opened it: an agent reading for an app names it on every request.
    const app = fields.app === undefined ? {} : { app: fields.app };
    const jobs: Array<{ part: number; offset: number; length: number }> = [];
    parts.forEach((p, part) => {
      for (let offset = 0; offset < p.size; offset += CHUNK) jobs.push({ part, offset, length: Math.min(CHUNK, p.size - offset) });
    });
    try {
      await inWindow(jobs, async (job) => {
        const r = await requestAcking(req, "obj-read", { tid: head.tid, ...job, ...app });
        noteRead(req, r.value);
        const chunk = r.frames[0]!;
        chunk.copy(parts[job.part]!.data, job.offset);
        bytes += chunk.byteLength;
      });
    } finally {
      await requestAcking(req, "obj-done", { tid: head.tid, ...app }).catch(() => undefined);
    }
  }
  ackSoon(req);
  return { mode: head.mode, version: head.version, baseVersion: head.baseVersion, parts, bytes };
}

/** What a write returns. */
export interface WriteResult {
  key: string;
  version: number;
  baseVersion: number;
  size: number;
}

/** Writes one value (`put` creates, `update` replaces the base, `patch` appends). */
export async function upload(
  req: Requester,
  op: "put" | "update" | "patch",
  key: string | undefined,
  value: EncodedValue,
  opts: { ifVersion?: number; pin?: boolean; scratch?: boolean },
): Promise<WriteResult> {
  const fields = { write: op, key, kind: value.kind, dtype: value.dtype, size: value.data.byteLength, ifVersion: opts.ifVersion, pin: opts.pin, scratch: opts.scratch };
  if (value.data.byteLength <= INLINE_LIMIT) return (await req.request<WriteResult>("obj-write", fields, [value.data])).value;
  const { value: begun } = await req.request<{ tid: number }>("obj-begin", fields);
  const jobs: number[] = [];
  for (let offset = 0; offset < value.data.byteLength; offset += CHUNK) jobs.push(offset);
  await inWindow(jobs, async (offset) => {
    await req.request("obj-chunk", { tid: begun.tid, offset }, [value.data.subarray(offset, offset + CHUNK)]);
  });
  return (await req.request<WriteResult>("obj-commit", { tid: begun.tid }, [], 120_000)).value;
}

/** Runs `work` over `jobs` with at most WINDOW in flight; the first failure stops the rest. */
async function inWindow<J>(jobs: J[], work: (job: J) => Promise<void>): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(WINDOW, jobs.length) }, async () => {
    while (next < jobs.length) await work(jobs[next++]!);
  });
  await Promise.all(lanes);
}
