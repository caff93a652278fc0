/**
 * Durable writes to a data dir, committed in groups (object-store.ts owns
 * the objects; this owns the order of the disk's work for them).
 *
 * A write is reported only once its parts, their folder and its manifest
 * are flushed to the disk, in that order: a power loss after a commit loses
 * nothing and tears nothing. A flush costs milliseconds (measured here: 2.9
 * ms for a small file, 1.8 ms for a folder), so flushing each write in turn
 * on the event loop stalled the head (10,000 small puts: minutes, and
 * drivers lost its heartbeat). Instead each write's bytes are flushed off
 * the event loop as soon as they are in, beside other writes' flushes; then
 * every write waiting (one per key: a later write of the same key must see
 * this one's version) is planned and its parts renamed into place, their
 * manifests are flushed together, the folder once, the manifests renamed
 * (each rename is a write's commit point), the folder once more, and only
 * then does memory follow and do the writers hear back.
 */
import { renameSync } from "node:fs";
import type { DType, ValueKind } from "../../sdk/cache/values.js";
import { HearthError, VersionConflictError } from "../../sdk/errors/index.js";
import { removeFiles, syncDir, syncFileAsync, writeFileDurable, writeFileDurableSync } from "./store-files.js";
import { objectIds, storageError, userKey, type ObjectMeta, type StoredObject, type StoredPart, type WriteOp } from "./stored-objects.js";

/** A store's two accounts: small parts in memory, large parts' files outside a data dir. */
export type Pool = "mem" | "file";

/** Options of a write: its precondition and marks. */
export type WriteOptions = { ifVersion?: number; pin?: boolean; scratch?: boolean };

/** A part of a write as it reaches the store: in memory, in a received file, or (with a data dir, once its bytes are down) both. */
export type IncomingPart = { kind: ValueKind; dtype?: DType; size: number; data?: Buffer; file?: string; sums?: number[] };

/** A write decided (version, room, manifest) and not yet in memory. */
export interface CommitPlan {
  op: WriteOp;
  key: string;
  /** The object the write was planned on (undefined: none): a delete meanwhile undoes the write. */
  existing?: StoredObject;
  version: number;
  parts: StoredPart[];
  meta: ObjectMeta;
  /** Where each part's file goes. */
  targets: string[];
  /** Bytes held for it in each pool until it is applied or undone (makeRoom counts them). */
  reserved: Record<Pool, number>;
}

/** The steps of a write, as the store runs them. */
export interface CommitSteps {
  /** The data dir's objects folder. */
  dir(): string;
  /** Flush (false only to measure what flushing costs). */
  sync: boolean;
  receivingFile(key: string): string;
  metaFile(key: string): string;
  /** The object `key` is now (a delete may have removed it since a plan). */
  current(key: string): StoredObject | undefined;
  /** Decides a write (throws its precondition's or its room's error); reserves its room. */
  plan(op: WriteOp, key: string, parts: IncomingPart[], opts: WriteOptions): CommitPlan;
  /** Renames the parts' files into place (ObjectStorageError on failure, nothing left). */
  placeParts(plan: CommitPlan, parts: IncomingPart[]): void;
  /** A plan that will not be applied: room freed, its files and `extra` removed. */
  undo(plan: CommitPlan, extra: string): void;
  /** Memory follows a write the disk took. */
  apply(plan: CommitPlan): StoredObject;
  /** Where the count of durable writes, group commits and their time go. */
  stats: { syncs: number; groupCommits: number; syncMs: number };
}

/** A write waiting for its group commit. */
interface PendingCommit {
  op: WriteOp;
  key: string;
  parts: IncomingPart[];
  opts: WriteOptions;
  resolve: (o: StoredObject) => void;
  reject: (e: unknown) => void;
}

/** The group commits of one data dir. */
export class GroupCommits {
  private pending: PendingCommit[] = [];
  private committing?: Promise<void>;

  constructor(private readonly steps: CommitSteps) {}

  /**
   * Commits one write durably: its bytes are flushed (a received file where
   * it lies, a small part written to a file of its own), then it joins the
   * next group commit. Resolves with the object once the disk has it.
   */
  async commit(op: WriteOp, key: string, parts: IncomingPart[], opts: WriteOptions): Promise<StoredObject> {
    const sync = this.steps.sync;
    const written: string[] = [];
    const ready: IncomingPart[] = [];
    try {
      for (const p of parts) {
        if (p.file) {
          if (sync) await syncFileAsync(p.file);
          ready.push(p);
        } else {
          const file = this.steps.receivingFile(key);
          written.push(file);
          await writeFileDurable(file, p.data!, sync);
          ready.push({ ...p, file });
        }
      }
    } catch (err) {
      removeFiles(written);
      throw storageError(op, key, err, "");
    }
    try {
      return await new Promise<StoredObject>((resolve, reject) => {
        this.pending.push({ op, key, parts: ready, opts, resolve, reject });
        this.kick();
      });
    } finally {
      removeFiles(written); // renamed into place if it committed
    }
  }

  /** Starts a group commit unless one is under way (that one starts the next when it ends). */
  private kick(): void {
    if (this.committing || this.pending.length === 0) return;
    this.committing = this.group().finally(() => {
      this.committing = undefined;
      this.kick();
    });
  }

  /** One group (see the module doc). Never rejects: each write's failure goes to its writer, with its files removed. */
  private async group(): Promise<void> {
    const { steps } = this;
    const keys = new Set<string>();
    const group: PendingCommit[] = [];
    const later: PendingCommit[] = [];
    for (const c of this.pending) (keys.has(c.key) ? later : (keys.add(c.key), group)).push(c);
    this.pending = later;
    const t0 = performance.now();
    let placed: Array<{ c: PendingCommit; plan: CommitPlan; tmp: string }> = [];
    for (const c of group) {
      const tmp = `${steps.metaFile(c.key)}.tmp`;
      let plan: CommitPlan | undefined;
      try {
        plan = steps.plan(c.op, c.key, c.parts, c.opts);
        steps.placeParts(plan, c.parts);
        writeFileDurableSync(tmp, Buffer.from(JSON.stringify(plan.meta)), false);
        placed.push({ c, plan, tmp });
      } catch (err) {
        if (plan) steps.undo(plan, tmp);
        c.reject(err instanceof HearthError ? err : storageError(c.op, c.key, err, ""));
      }
    }
    const fail = (p: (typeof placed)[number], err: unknown, file = p.tmp): void => {
      steps.undo(p.plan, file);
      p.c.reject(err instanceof HearthError ? err : storageError(p.c.op, p.c.key, err, ""));
    };
    const deleted = (p: (typeof placed)[number]): VersionConflictError =>
      new VersionConflictError(`${p.c.op} of '${userKey(p.c.key)}' met a delete of the object while it committed; nothing was written, write it again`, {
        ...objectIds(p.c.key),
        expected: p.plan.version - 1,
        actual: steps.current(p.c.key)?.version ?? 0,
      });
    if (steps.sync) {
      // The parts' names and the manifests' bytes reach the disk before any manifest takes its name.
      const flushed = await Promise.all(placed.map((p) => syncFileAsync(p.tmp).then(() => undefined, (err: unknown) => err)));
      placed = placed.filter((p, i) => (flushed[i] === undefined ? true : (fail(p, flushed[i]), false)));
      try {
        await syncDir(steps.dir());
      } catch (err) {
        for (const p of placed) fail(p, err);
        placed = [];
      }
    }
    const renamed: typeof placed = [];
    for (const p of placed) {
      // A delete that ran while this group flushed took the object this write was planned on.
      if (steps.current(p.c.key) !== p.plan.existing) {
        fail(p, deleted(p));
        continue;
      }
      try {
        renameSync(p.tmp, steps.metaFile(p.c.key));
        renamed.push(p);
      } catch (err) {
        fail(p, err);
      }
    }
    if (steps.sync && renamed.length > 0) {
      try {
        await syncDir(steps.dir());
      } catch {
        // The manifests are renamed (the commit point passed): the writes stand; only their flush is in doubt.
      }
    }
    for (const p of renamed) {
      // Deleted while the folder flushed: the write stood on disk a moment, and goes the way of the delete.
      if (steps.current(p.c.key) !== p.plan.existing) fail(p, deleted(p), steps.metaFile(p.c.key));
      else p.c.resolve(steps.apply(p.plan));
    }
    if (renamed.length > 0) {
      steps.stats.syncs += renamed.length;
      steps.stats.groupCommits++;
      steps.stats.syncMs += performance.now() - t0;
    }
  }
}
