/**
 * Service classes for the deadline, liveness and orphan tests: calls that
 * sleep, spin in synchronous code (a wedged executor), and an init that never
 * finishes.
 */
import type { ExecutorContext } from "../../sdk/runtime/types.js";

/** A pool member whose calls can sleep (async) or spin (blocking its event loop). */
export class Sleeper {
  private ctx!: ExecutorContext;
  calls = 0;

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** Where this executor runs. */
  whoami(): { executorId: string; pid: number; calls: number } {
    return { executorId: this.ctx.executorId, pid: process.pid, calls: this.calls };
  }

  /** Counts itself, then resolves after `ms`. */
  async sleep(ms: number): Promise<{ executorId: string; pid: number }> {
    this.calls++;
    await new Promise((r) => setTimeout(r, ms));
    return { executorId: this.ctx.executorId, pid: process.pid };
  }

  /** Busy-waits `ms` in synchronous code: no timer, IPC or socket event runs meanwhile. Bounded, so a failed test leaves nothing spinning for long. */
  spin(ms: number): number {
    this.calls++;
    const end = Date.now() + ms;
    let n = 0;
    while (Date.now() < end) n++;
    return n;
  }
}

/** A service whose init never finishes (a hung model load). */
export class HangingInit {
  async init(): Promise<void> {
    await new Promise(() => undefined);
  }

  ping(): string {
    return "pong";
  }
}
