/**
 * Weight publication through the object cache. Rank 0 of the trainers puts
 * the first publication (full bf16 shards) as the base of one object and
 * appends every later publication (an exact patch) with `patch`. A rollout
 * holding version v fetches only the patches after v and applies them in
 * order; the engine touches only the changed tensors.
 */
import type { ObjectCache } from "../cache/object-cache.js";
import type { TensorEngine } from "../tensor/index.js";
import type { Publication } from "../tensor/types.js";

/** One publication as stored: its version and its safetensors blobs. */
export interface StoredPublication {
  version: number;
  kind: "full" | "patch";
  blobs: Buffer[];
}

/** What a rollout holds: the publication version applied to its engine. */
export interface PublicationRecord {
  version: number;
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

/** Shard size of full publications (256 MiB): a 1 GB base is applied in four engine requests. */
export const DEFAULT_SHARD_BYTES = 256 * 1024 * 1024;

/** What one publication wrote. */
export type PublishStats = Omit<Publication, "blobs"> & { cacheVersion: number; rebased: boolean };

/**
 * Rank 0's publisher: the first publication is the base of the weights
 * object, later ones are appended patches, and past the re-base policy a
 * fresh full base replaces the object (`update` frees the old base and its
 * patches), so a rollout that joins late fetches one base and a few patches.
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
    /** Shard size of a full publication: every rollout engine then holds one shard at a time while applying. */
    private readonly maxShardBytes = DEFAULT_SHARD_BYTES,
  ) {}

  /**
   * Publishes the engine's current weights; `full` makes this publication a
   * fresh base, and `version` a fresh base numbered so (trainers restored
   * from a snapshot go on at the version the rollouts hold).
   */
  async publish(options: { full?: boolean; version?: number } = {}): Promise<PublishStats> {
    const rebase =
      this.mustRebase ||
      options.version !== undefined ||
      (this.baseBytes > 0 && (options.full === true || this.patches >= this.policy.maxPatches || this.patchBytes > this.policy.maxPatchShare * this.baseBytes));
    const pub = await this.engine.publish(this.maxShardBytes, { full: rebase, version: options.version });
    const record = encodePublication({ version: pub.version, kind: pub.kind, blobs: pub.blobs });
    pub.blobs = []; // the engine's frame can go as soon as the record holds the bytes
    let version: number;
    // The engine diffs against what it published last, so a patch the cache refused (CacheFullError
    // past its limit, a storage error) would leave the cache a version behind the engine: the cache
    // keeps what it had (readers still get the last good version) and the next publication re-bases.
    this.mustRebase = true;
    if (pub.kind === "full") {
      version = (this.baseBytes === 0 ? await putOrReplace(this.objects, this.key, record) : await this.objects.update(this.key, record)).version;
      this.baseBytes = pub.bytes;
      this.patches = 0;
      this.patchBytes = 0;
    } else {
      version = (await this.objects.patch(this.key, record)).version;
      this.patches++;
      this.patchBytes += pub.bytes;
    }
    this.mustRebase = false;
    const { blobs: _blobs, ...stats } = pub;
    return { ...stats, cacheVersion: version, rebased: rebase };
  }
}

async function putOrReplace(objects: ObjectCache, key: string, record: Buffer) {
  try {
    return await objects.put(record, { key, pin: true });
  } catch {
    return objects.update(key, record);
  }
}

const MAGIC = Buffer.from("HWP1");

/**
 * A publication as one byte string, stored as raw bytes (never re-encoded):
 * "HWP1", a u32 LE length, a JSON header {version, kind, sizes}, then the
 * blobs. Packing a 1 GB base with msgpack copied it into the packer's
 * reusable buffer, which then stayed allocated in the publisher's process.
 */
export function encodePublication(p: StoredPublication): Buffer {
  const json = Buffer.from(JSON.stringify({ version: p.version, kind: p.kind, sizes: p.blobs.map((b) => b.byteLength) }));
  const len = Buffer.alloc(4);
  len.writeUInt32LE(json.byteLength);
  return Buffer.concat([MAGIC, len, json, ...p.blobs]);
}

/** Inverse of encodePublication (blobs are views into `b`); msgpack records of older publishers pass through. */
export function decodePublication(b: unknown): StoredPublication {
  if (!Buffer.isBuffer(b)) return b as StoredPublication;
  if (b.byteLength < 8 || !b.subarray(0, 4).equals(MAGIC)) throw new Error("not a weights publication (no HWP1 header)");
  const n = b.readUInt32LE(4);
  const head = JSON.parse(b.subarray(8, 8 + n).toString("utf8")) as { version: number; kind: "full" | "patch"; sizes: number[] };
  let at = 8 + n;
  const blobs = head.sizes.map((size) => b.subarray(at, (at += size)));
  if (at !== b.byteLength) throw new Error(`a weights publication of ${b.byteLength} bytes announces ${at}`);
  return { version: head.version, kind: head.kind, blobs };
}

/** Brings an engine to the latest publication, applying only what it has not seen. */
export function applyPublications(objects: ObjectCache, key: string, engine: TensorEngine): Promise<PublicationRecord> {
  return objects.get<PublicationRecord>(key, {
    fold: async (acc, patches) => {
      // First time (or after a new base) `acc` is the full publication itself; later it is what we applied.
      const isBase = Buffer.isBuffer(acc) || "blobs" in (acc as object);
      const pending: StoredPublication[] = [];
      if (isBase) pending.push(decodePublication(acc));
      pending.push(...patches.map(decodePublication));
      let version = isBase ? 0 : (acc as PublicationRecord).version;
      for (const p of pending) {
        if (p.version <= version && p.kind === "patch") continue;
        // One engine request per blob: the engine reads one shard of a base at a time, not the whole model.
        for (const blob of p.blobs) version = (await engine.apply([blob])).version;
      }
      return { version };
    },
  });
}
