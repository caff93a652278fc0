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

/** Publishes from a trainer engine; returns the stats of what was written. */
export async function publishWeights(objects: ObjectCache, key: string, engine: TensorEngine): Promise<Omit<Publication, "blobs"> & { cacheVersion: number }> {
  const pub = await engine.publish();
  const record: StoredPublication = { version: pub.version, kind: pub.kind, blobs: pub.blobs };
  const ref = pub.kind === "full" ? await putOrReplace(objects, key, record) : await objects.patch(key, record);
  const { blobs: _blobs, ...stats } = pub;
  return { ...stats, cacheVersion: ref.version };
}

async function putOrReplace(objects: ObjectCache, key: string, record: StoredPublication) {
  try {
    return await objects.put(record, { key, pin: true });
  } catch {
    return objects.update(key, record);
  }
}

/** Brings an engine to the latest publication, applying only what it has not seen. */
export function applyPublications(objects: ObjectCache, key: string, engine: TensorEngine): Promise<PublicationRecord> {
  return objects.get<PublicationRecord>(key, {
    fold: async (acc, patches) => {
      // First time (or after a new base) `acc` is the full publication itself; later it is what we applied.
      const pending: StoredPublication[] = [];
      if ("blobs" in (acc as object)) pending.push(acc as unknown as StoredPublication);
      pending.push(...(patches as StoredPublication[]));
      let version = "blobs" in (acc as object) ? 0 : (acc as PublicationRecord).version;
      for (const p of pending) {
        if (p.version <= version && p.kind === "patch") continue;
        const r = await engine.apply(p.blobs);
        version = r.version;
      }
      return { version };
    },
  });
}
