/**
 * The writer's side of a node keeping an upload as its copy
 * (cluster-agent/node-keep.ts): an executor that uploads a base from files
 * hands each file to its node cache as the head has it whole, and tells the
 * node when the write committed (or failed). The node then holds the object
 * without fetching a byte of it (a small part's bytes, at most 1 MiB, go to
 * it over loopback). Keeping is an optimisation only: a part the
 * node cannot keep (a stream, a file it refuses) leaves the
 * object to be fetched as usual, and the write itself never fails for it.
 */
import { randomBytes } from "node:crypto";
import { open } from "node:fs/promises";
import type { Requester } from "../wire/requests.js";
import { INLINE_LIMIT, type SentPart, type WriteResult } from "./transfer.js";

/** Deadline of handing one part over (a file on another file system is copied and checked there: 256 MiB in well under this). */
const KEEP_PART_MS = 60_000;
/** Deadline of the install after the commit (two small requests to the head and a rename). */
const KEEP_COMMIT_MS = 30_000;

/** One upload's parts handed to the writer's node cache. */
export class KeepOnNode {
  private readonly token = randomBytes(12).toString("hex");
  private handed = 0;
  private bytes = 0;
  /** A part could not be handed over: the node keeps none of this upload. */
  private refused = false;

  constructor(private readonly node: Requester) {}

  /** Part `index` reached the head whole: its file, when it has one, goes to the node before the writer may remove it. */
  async part(index: number, sent: SentPart): Promise<void> {
    if (this.refused) return;
    if (!sent.file) {
      this.refused = true;
      return;
    }
    try {
      const fields = { token: this.token, part: index, file: sent.file, size: sent.size, sums: sent.sums };
      // A small part lives in the node's memory: its bytes go (at most 1 MiB), checked there against the sums.
      if (sent.size <= INLINE_LIMIT) await this.node.request("obj-keep", { ...fields, inline: true }, [await readSmall(sent.file, sent.size)], KEEP_PART_MS);
      else await this.node.request("obj-keep", fields, [], KEEP_PART_MS);
      this.handed++;
      this.bytes += sent.size;
    } catch {
      // The node refused this file (another user's, a copy that failed): it fetches the object when read.
      this.refused = true;
    }
  }

  /** The write committed as `r`: the node installs what it kept; resolves with the bytes it holds so, 0 when it fetches instead. */
  async committed(r: WriteResult): Promise<number> {
    if (this.handed === 0) return 0;
    if (this.refused) {
      this.failed();
      return 0;
    }
    try {
      const { value } = await this.node.request<{ installed: boolean }>("obj-kept", { token: this.token, key: r.key, version: r.version, baseVersion: r.baseVersion }, [], KEEP_COMMIT_MS);
      return value.installed ? this.bytes : 0;
    } catch {
      // The write committed all the same; the node logged why it did not install the files and fetches them when read.
      return 0;
    }
  }

  /** The write failed: the node drops what it kept of it now (else when it expires). */
  failed(): void {
    if (this.handed === 0) return;
    this.node.request("obj-kept", { token: this.token, discard: true }, [], KEEP_COMMIT_MS).catch(() => undefined);
  }
}

/** The first `size` bytes of `file` (a small part: at most 1 MiB; fewer when it shrank, which the node refuses). */
async function readSmall(file: string, size: number): Promise<Buffer> {
  const fh = await open(file, "r");
  try {
    const buf = Buffer.alloc(size);
    const { bytesRead } = await fh.read(buf, 0, size, 0);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}
