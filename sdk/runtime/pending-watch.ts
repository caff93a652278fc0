/**
 * While `service()` waits for readiness, say what is pending and why: at
 * once (the head places executors when the service is declared, so what it
 * could not place is known right away), then every `everyMs` until the wait
 * ends. The head explains (cluster-agent/head/pending.ts: which service,
 * placed of wanted, what each agent has free); a service placed in full is
 * never reported. The ready deadline's TimeoutError names the same.
 */

/** Why a service waits for placement, as the head's status explains it. */
export interface PendingReport {
  service: string;
  kind: "pool" | "gang";
  /** Executors placed (starting or serving) of the number the service waits for. */
  placed: number;
  wanted: number;
  /** What one executor needs, e.g. "cpu=1,mem=512m". */
  each: string;
  /** Each agent that may host it: free and total (gpus counted), and what holds the rest. */
  agents: Array<{ id: string; free: { cpu: number; mem: number; gpus: number }; total: { cpu: number; mem: number; gpus: number }; holders: string }>;
  /** All of it in one sentence. */
  text: string;
}

/** Default of ServiceOptions.pendingEveryMs: how often a pending service is reported again. */
export const PENDING_EVERY_MS = 20_000;

/** The default report: one line on stderr (a notebook shows it in the cell). */
export function printPending(p: PendingReport): void {
  process.stderr.write(`hearth: ${p.text}\n`);
}

/**
 * Resolves as `until` does, calling `report` with `fetch()`'s explanation at
 * once and every `everyMs` while it is pending. A failed fetch is skipped
 * (the wait itself still ends at its own deadline).
 */
export async function watchPending<T>(until: Promise<T>, fetch: () => Promise<PendingReport | null | undefined>, report: (p: PendingReport) => void, everyMs: number): Promise<T> {
  let done = false;
  let wake: () => void = () => undefined;
  const watcher = (async () => {
    while (!done) {
      const p = await fetch().catch(() => undefined);
      if (done) return;
      if (p) report(p);
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, everyMs);
      });
      clearTimeout(timer);
    }
  })();
  try {
    return await until;
  } finally {
    done = true;
    wake();
    await watcher;
  }
}
