/**
 * The service class of 02-runtime-tour.ipynb. Executors load it as
 * TypeScript (through tsx, no build step), with its relative imports; the
 * kernel type-checks it and what it imports before the notebook's
 * `app.service("./services/tour.ts#Tour", …)` starts any executor.
 */
import { squareOf, sum } from "./arith.js";
import type { TourContext } from "./context.js";

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
    return squareOf(x);
  }

  /** x², after `ms` milliseconds: enough queued slow calls make the pool grow. */
  async slowSquare(x: number, ms: number): Promise<{ x: number; square: number; executorId: string }> {
    await new Promise((r) => setTimeout(r, ms));
    this.callsDone++;
    return { x, square: squareOf(x), executorId: this.ctx.executorId };
  }

  /** Identity of this executor; gang members report their rank. */
  whoami(): Whoami {
    return { executorId: this.ctx.executorId, rank: this.ctx.rank, worldSize: this.ctx.worldSize, pid: process.pid, callsDone: this.callsDone };
  }

  /** Sums a cached array of numbers: the executor fetches the object (only what it has not seen) through its node's cache. */
  async sumObject(ref: { key: string }): Promise<{ sum: number; version: number | undefined; executorId: string }> {
    const xs = await this.ctx.objects.get<number[]>(ref);
    this.callsDone++;
    return { sum: sum(xs), version: this.ctx.objects.heldVersion(ref), executorId: this.ctx.executorId };
  }

  /** Milliseconds since init: the same executor answers with a growing number (it stayed warm). */
  uptimeMs(): number {
    return Date.now() - this.startedAt;
  }
}
