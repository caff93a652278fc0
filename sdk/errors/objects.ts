/**
 * Errors of the object cache (the head's store, the node caches, the SDK's
 * ObjectCache): a write whose version precondition failed, an object that is
 * not there or was evicted, a cache too full to take a put, and a write the
 * head's data dir refused. Each names the key (as the app sees it) and the app.
 */
import { HearthError, type ErrorOptions } from "./hearth-error.js";

/** Which object an error is about: its key as the app wrote it, and the app. */
export interface ObjectIds {
  /** The object key as the app sees it (without the app prefix). */
  key: string;
  /** The app the object belongs to. */
  app?: string;
}

/** A write's `ifVersion` precondition did not hold: someone else wrote first. */
export class VersionConflictError extends HearthError {
  override name = "VersionConflictError";
  declare readonly key: string;
  declare readonly app?: string;
  /** The version the write expected (0: that it did not exist). */
  declare readonly expected: number;
  /** The version the object is at (0: it does not exist). */
  declare readonly actual: number;
  constructor(message: string, fields: ObjectIds & { expected: number; actual: number } & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app, expected: fields.expected, actual: fields.actual });
  }
}

/** No object with that key exists in the app (or it was deleted). */
export class ObjectNotFoundError extends HearthError {
  override name = "ObjectNotFoundError";
  declare readonly key: string;
  declare readonly app?: string;
  constructor(message: string, fields: ObjectIds & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app });
  }
}

/** An object was dropped to make room, and there was no data dir to reload it from. */
export class ObjectEvictedError extends HearthError {
  override name = "ObjectEvictedError";
  declare readonly key: string;
  declare readonly app?: string;
  constructor(message: string, fields: ObjectIds & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app });
  }
}

/**
 * A connection asked for more object data while holding more than its limit
 * of data it had not acknowledged reading, and did not catch up in time (the
 * head's and agents' read credit, cluster-agent/read-credit.ts). Retryable
 * once the replies already sent are read.
 */
export class BackpressureError extends HearthError {
  override name = "BackpressureError";
  /** Unacknowledged bytes the connection held. */
  declare readonly unread: number;
  /** Its limit in bytes. */
  declare readonly limit: number;
  constructor(message: string, fields: { unread: number; limit: number } & ErrorOptions) {
    super(message, fields, { unread: fields.unread, limit: fields.limit });
  }
}

/** A put cannot fit in the cache's memory limit even after evicting everything evictable. */
export class CacheFullError extends HearthError {
  override name = "CacheFullError";
  /** The key being written (or reloaded from disk). */
  declare readonly key: string;
  declare readonly app?: string;
  /** Bytes the write needed. */
  declare readonly size: number;
  /** The cache's memory limit in bytes. */
  declare readonly limit: number;
  constructor(message: string, fields: ObjectIds & { size: number; limit: number } & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app, size: fields.size, limit: fields.limit });
  }
}

/**
 * The head's data dir refused a write or a delete (a full disk, ENOSPC; a
 * read-only one, EROFS): nothing changed, in memory or on disk, so the same
 * request can be retried once the disk has room again.
 */
export class ObjectStorageError extends HearthError {
  override name = "ObjectStorageError";
  declare readonly key: string;
  declare readonly app?: string;
  /** The operation the disk refused: put, update, patch or delete. */
  declare readonly op: string;
  /** The file system's error code (ENOSPC, EROFS, EIO…). */
  declare readonly code: string;
  constructor(message: string, fields: ObjectIds & { op: string; code: string } & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app, op: fields.op, code: fields.code });
  }
}

/**
 * The bytes of a stored part are not the ones written: a chunk read from its
 * file (or received from a peer) does not match the sum recorded when the
 * part was written (a hole, a torn write, a disk fault, an edit). The bytes
 * are refused, never served; writing the object again replaces them.
 */
export class ObjectCorruptError extends HearthError {
  override name = "ObjectCorruptError";
  declare readonly key: string;
  declare readonly app?: string;
  /** The part's index in the object (base parts, then patches). */
  declare readonly part: number;
  /** Byte offset of the chunk that failed its check. */
  declare readonly offset: number;
  constructor(message: string, fields: ObjectIds & { part: number; offset: number } & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app, part: fields.part, offset: fields.offset });
  }
}

/**
 * An object (or a part of one) is larger than this process may hold in one
 * buffer (`HEARTH_MAX_BUFFER_BYTES`, default 1 GiB, at most Node's 4 GiB):
 * it must be read as a stream (`getStream`, `getToFile`, `getParts`) or
 * written from one (`fromFile`, `fromStream`), never whole in memory.
 */
export class BufferLimitError extends HearthError {
  override name = "BufferLimitError";
  declare readonly key: string;
  declare readonly app?: string;
  /** Bytes the buffer would have held. */
  declare readonly size: number;
  /** This process's limit in bytes. */
  declare readonly limit: number;
  constructor(message: string, fields: ObjectIds & { size: number; limit: number } & ErrorOptions) {
    super(message, fields, { key: fields.key, app: fields.app, size: fields.size, limit: fields.limit });
  }
}
