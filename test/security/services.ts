/**
 * A service for the adversarial suite: it tells the test what its executor
 * was given (routing id, cache endpoint, credential), so the test can try to
 * use what an attacker on the same machine could guess or learn.
 */
import type { ExecutorContext } from "../../sdk/runtime/types.js";

/** Reports its wire identity and answers pings. */
export class Vault {
  private ctx!: ExecutorContext;

  init(ctx: ExecutorContext): void {
    this.ctx = ctx;
  }

  /** Who answered: the test checks no call reached anyone else. */
  ping(): { executorId: string; pid: number } {
    return { executorId: this.ctx.executorId, pid: process.pid };
  }

  /** What the agent put in this executor's environment. */
  identity(): { executorId: string; app: string; routingId: string | null; cache: string | null; token: string | null; secretFile: string | null; home: string | null } {
    return {
      executorId: this.ctx.executorId,
      app: this.ctx.app,
      routingId: process.env.HEARTH_EXECUTOR_ROUTING_ID ?? null,
      cache: process.env.HEARTH_AGENT_CACHE ?? null,
      token: process.env.HEARTH_EXECUTOR_TOKEN ?? null,
      secretFile: process.env.HEARTH_SECRET_FILE ?? null,
      home: process.env.HEARTH_HOME ?? null,
    };
  }

  /** Reads an object of its own app through the agent's cache. */
  async read(key: string): Promise<unknown> {
    return await this.ctx.objects.get(key);
  }
}
