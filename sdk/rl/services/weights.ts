/**
 * Weight publication through the object cache. Rank 0 of the trainers
 * publishes into one cache object per run: a full publication is its base,
 * one part per shard; every later publication (an exact patch) is an
 * appended part; past the re-base policy a fresh full base replaces the
 * object (its commit frees the old base and patches). Nothing of a
 * publication is ever one buffer: the engine writes each blob to a file
 * (tensor by tensor), the publisher streams each shard to the head while the
 * engine writes the next, the write commits when the last shard is in (the
 * object's manifest: readers never see part of a publication), and each node
 * keeps one copy of each part as a file that its rollouts' engines map and
 * copy straight into their tensors. The publisher's own node keeps the shard
 * files themselves as its copy (handed over as each reaches the head), so it
 * fetches nothing of a publication back. A rollout holding version v reads only
 * the parts after v and applies them in order.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fromFile, fromParts, type ObjectCache, type ObjectRef, type StreamedValue } from "../../cache/object-cache.js";
import { maxBufferBytes } from "../../cache/buffers.js";
import { HearthError } from "../../errors/index.js";
import type { TensorEngine } from "../../tensor/index.js";
import type { FilePublication, PublishedFile } from "../../tensor/types.js";
import type { PublishStats } from "../types.js";

/** What a rollout holds: the publication version applied to its engine, and the cache version it came from. */
export interface PublicationRecord {
  /** The publication version (the trainers' policy version; 0: none yet). */
  version: number;
  /** The weights object's cache version and base version the engine holds (undefined: none). */
  cache?: { version: number; baseVersion: number };
}

/** What one sync applied. */
export interface SyncResult extends PublicationRecord {
  /** Bytes of the parts applied (read where the node keeps them). */
  bytes: number;
  /** Kinds applied, in order, one per publication. */
  applied: Array<"full" | "patch">;
}

/** When the published object gets a fresh base instead of another patch. */
export interface RebasePolicy {
  /** After this many patches on one base. */
  maxPatches: number;
  /** When the patches on one base add up to more than this share of its bytes. */
  maxPatchShare: number;
}

/** Re-base after 20 patches, or once they outweigh half the base. */
export const DEFAULT_REBASE: RebasePolicy = { maxPatches: 20, maxPatchShare: 0.5 };

/** Shard size of full publications (256 MiB): a base travels and is applied a shard at a time. */
export const DEFAULT_SHARD_BYTES = 256 * 1024 * 1024;

/** A patch up to this size comes back from the engine in its reply, not a file (a step's patch: 26 MB at the 0.5B shape and 2.7 % changed). */
export const DEFAULT_INLINE_PATCH_BYTES = 64 * 1024 * 1024;

/** What one publication wrote. */
export type { PublishStats } from "../types.js";

/** Options of WeightPublisher beyond the policy. */
export interface PublisherOptions {
  /** Shard size of a full publication (default DEFAULT_SHARD_BYTES). */
  maxShardBytes?: number;
  /** Where the engine writes a publication's files before they are shipped (default the OS temp folder). */
  scratchDir?: string;
  /** Keep the engine's last-published bf16 copy for patches (default true; false: every publication is full, in half the memory). */
  keepLast?: boolean;
  /** A patch up to this many bytes comes back in the engine's reply instead of a file (default DEFAULT_INLINE_PATCH_BYTES; 0: always a file). */
  inlinePatchBytes?: number;
  /** Called as each shard has reached the head (benchmarks time the pipeline). */
  onShard?: (shard: { shard: number; size: number }) => void;
}

/**
 * Rank 0's publisher: the first publication is the base of the weights
 * object, later ones are appended patches, and past the re-base policy a
 * fresh full base replaces the object, so a rollout that joins late fetches
 * one base and a few patches.
 */
export class WeightPublisher {
  private patches = 0;
  private patchBytes = 0;
  private baseBytes = 0;
  /** A write failed after the engine moved its last-published copy on: the next publication is a fresh base. */
  private mustRebase = false;

  constructor(
    private readonly objects: ObjectCache,
    private readonly key: string,
    private readonly engine: TensorEngine,
    private readonly policy: RebasePolicy = DEFAULT_REBASE,
    private readonly opts: PublisherOptions = {},
  ) {}

  /**
   * Publishes the engine's current weights; `full` makes this publication a
   * fresh base, and `version` a fresh base numbered so (trainers restored
   * from a snapshot go on at the version the rollouts hold).
   */
  async publish(options: { full?: boolean; version?: number } = {}): Promise<PublishStats> {
    const rebase =
      this.mustRebase ||
      this.opts.keepLast === false ||
      options.version !== undefined ||
      (this.baseBytes > 0 && (options.full === true || this.patches >= this.policy.maxPatches || this.patchBytes > this.policy.maxPatchShare * this.baseBytes));
    const dir = mkdtempSync(path.join(this.opts.scratchDir ?? os.tmpdir(), "hearth-publish-"));
    // The engine diffs against what it published last, so a publication the cache refused (CacheFullError
    // past its limit, a storage error) would leave the cache a version behind the engine: the cache
    // keeps what it had (readers still get the last good version) and the next publication re-bases.
    this.mustRebase = true;
    const shards = new FileQueue((f) => this.opts.onShard?.({ shard: f.shard, size: f.size }));
    let writing: Promise<ObjectRef> | undefined;
    let pub: FilePublication;
    try {
      const engineDone = this.engine.publishFiles(dir, {
        maxShardBytes: this.opts.maxShardBytes ?? DEFAULT_SHARD_BYTES,
        full: rebase,
        version: options.version,
        keepLast: this.opts.keepLast,
        inlineMax: Math.min(this.opts.inlinePatchBytes ?? DEFAULT_INLINE_PATCH_BYTES, maxBufferBytes()),
        onFile: (f) => {
          // A full publication's shards go to the head as the engine writes them, the next while this one travels.
          if (f.kind !== "full") return;
          writing ??= this.writeBase(shards);
          shards.push(f);
        },
      });
      pub = await engineDone.finally(() => shards.end());
      if (pub.kind === "full") {
        if (!writing) throw new HearthError(`publication v${pub.version}: the engine wrote a full publication nobody shipped`);
      } else {
        const file = pub.files[0];
        if (!file || pub.files.length !== 1) throw new HearthError(`publication v${pub.version}: a patch is one blob; the engine wrote ${pub.files.length}`);
        writing = this.objects.patch(this.key, file.blob ?? fromFile(file.path));
      }
      const ref = await writing;
      if (pub.kind === "full") {
        this.baseBytes = pub.bytes;
        this.patches = 0;
        this.patchBytes = 0;
      } else {
        this.patches++;
        this.patchBytes += pub.bytes;
      }
      this.mustRebase = false;
      const { files: _files, ...stats } = pub;
      return { ...stats, cacheVersion: ref.version, rebased: rebase };
    } catch (err) {
      shards.fail(err);
      await writing?.catch(() => undefined);
      throw err;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  /** A fresh base made of the shards as they come (put the first time, else update: its commit frees the old base and patches). */
  private async writeBase(shards: FileQueue): Promise<ObjectRef> {
    if (this.baseBytes === 0) {
      try {
        return await this.objects.put(fromParts(shards), { key: this.key, pin: true });
      } catch (err) {
        // The object exists (a publisher that took over from a lost one): the put was refused before
        // any shard was read, so the same shards go as an update.
        if ((err as Error).name !== "VersionConflictError") throw err;
      }
    }
    return this.objects.update(this.key, fromParts(shards));
  }
}

/** The shard files of one publication as the engine announces them, read by the upload in order; each file goes once it is sent. */
class FileQueue implements AsyncIterable<StreamedValue> {
  private readonly files: PublishedFile[] = [];
  private done = false;
  private failure?: unknown;
  private wake?: () => void;

  constructor(private readonly onSent: (f: PublishedFile) => void) {}

  push(f: PublishedFile): void {
    this.files.push(f);
    this.wake?.();
  }

  end(): void {
    this.done = true;
    this.wake?.();
  }

  fail(err: unknown): void {
    this.failure ??= err;
    this.wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamedValue> {
    let previous: PublishedFile | undefined;
    for (;;) {
      if (this.failure !== undefined) throw this.failure;
      const f = this.files.shift();
      if (previous) {
        // Asked for the next part: the previous one reached the head whole.
        rmSync(previous.path, { force: true });
        this.onSent(previous);
        previous = undefined;
      }
      if (f) {
        previous = f;
        // Removed once sent and never changed: this node may keep it as its copy of the publication.
        yield fromFile(f.path, { handOver: true });
        continue;
      }
      if (this.done) return;
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }
}

/** A part's arrival, watched: `done` once its bytes are in place (a rejection is kept for whoever awaits `wait`). */
function whenReady(ready: (() => Promise<void>) | undefined): { done: boolean; wait: Promise<void> } {
  if (!ready) return { done: true, wait: Promise.resolve() };
  const w = { done: false, wait: ready().then(() => { w.done = true; }) };
  w.wait.catch(() => undefined); // awaited in order; a copy that failed rejects there, not as unhandled
  return w;
}

/**
 * Brings an engine from `held` to the latest publication: the base again
 * (every part) when the engine holds none or another one, else only the
 * patches after it, each part read where this node keeps it. On failure the
 * engine may hold part of a publication: the caller must treat it as holding
 * none (`{ version: 0 }`), so that the next sync applies the base whole.
 */
export async function applyPublications(objects: ObjectCache, key: string, engine: TensorEngine, held: PublicationRecord = { version: 0 }): Promise<SyncResult> {
  // A client without a node cache (a driver) downloads large parts here; an executor reads its node's copies in place.
  const scratch = mkdtempSync(path.join(os.tmpdir(), "hearth-sync-"));
  try {
    // Progressive: a base still arriving at this node is applied a part at a time as each part lands.
    const r = await objects.getParts(key, { dir: scratch, have: held.version === 0 ? undefined : held.cache, progressive: true });
    if (r.mode === "not-modified") return { ...held, bytes: 0, applied: [] };
    let version = r.mode === "full" ? 0 : held.version;
    let bytes = 0;
    const applied: Array<"full" | "patch"> = [];
    // The parts in place go to the engine in one request (it checks the whole chain before it
    // writes); a part the node still receives is awaited, and whatever is in place by then goes with it.
    const arrived = r.parts.map((part) => whenReady(part.ready));
    for (let i = 0; i < r.parts.length;) {
      await arrived[i]!.wait;
      let j = i + 1;
      while (j < r.parts.length && arrived[j]!.done) j++;
      const batch = r.parts.slice(i, j);
      const done = await engine.applySources(batch.map((part) => (part.file ? { path: part.file } : { data: part.data! })));
      for (const a of done.applied) {
        if (applied.length === 0 || version !== a.version) applied.push(a.kind as "full" | "patch");
        version = a.version;
      }
      version = done.version;
      for (const part of batch) {
        bytes += part.size;
        if (part.file?.startsWith(scratch)) rmSync(part.file, { force: true });
      }
      i = j;
    }
    return { version, cache: { version: r.version, baseVersion: r.baseVersion }, bytes, applied };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
