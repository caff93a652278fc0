/**
 * The service class of 02-runtime-tour.ipynb. It stays self-contained (node
 * built-ins only): the notebook transpiles this one file with
 * `compileServiceModule` for its executors, and the kernel type-checks it as a
 * local import, which must not reach outside the notebook's directory.
 */

/** The part of hearth's object cache client this service uses. */
export interface TourObjects {
  get<T>(ref: { key: string } | string): Promise<T>;
  heldVersion(ref: { key: string } | string): number | undefined;
}

/** The part of hearth's ExecutorContext this service reads (structurally compatible). */
export interface TourContext {
  executorId: string;
  rank: number | null;
  worldSize: number | null;
  objects: TourObjects;
}

/** What an executor says about itself. */
export interface Whoami {
  executorId: string;
  rank: number | null;
  worldSize: number | null;
  pid: number;
  callsDone: number;
}

/** A tiny warm service: remembers who it is and how many calls it served. */
export class Tour {
  private ctx!: TourContext;
  private callsDone = 0;
  private readonly startedAt = Date.now();

  async init(ctx: TourContext): Promise<void> {
    this.ctx = ctx;
  }

  /** x², answered at once. */
  square(x: number): number {
    this.callsDone++;
    return x * x;
  }

  /** x², after `ms` milliseconds: enough queued slow calls make the pool grow. */
  async slowSquare(x: number, ms: number): Promise<{ x: number; square: number; executorId: string }> {
    await new Promise((r) => setTimeout(r, ms));
    this.callsDone++;
    return { x, square: x * x, executorId: this.ctx.executorId };
  }

  /** Identity of this executor; gang members report their rank. */
  whoami(): Whoami {
    return { executorId: this.ctx.executorId, rank: this.ctx.rank, worldSize: this.ctx.worldSize, pid: process.pid, callsDone: this.callsDone };
  }

  /** Sums a cached array of numbers: the executor fetches the object (only what it has not seen) through its node's cache. */
  async sumObject(ref: { key: string }): Promise<{ sum: number; version: number | undefined; executorId: string }> {
    const xs = await this.ctx.objects.get<number[]>(ref);
    this.callsDone++;
    return { sum: xs.reduce((a, b) => a + b, 0), version: this.ctx.objects.heldVersion(ref), executorId: this.ctx.executorId };
  }

  /** Milliseconds since init: the same executor answers with a growing number (it stayed warm). */
  uptimeMs(): number {
    return Date.now() - this.startedAt;
  }
}
