/**
 * The policy versions a run keeps for replays. The live weights object holds
 * one chain: a base and the patches after it, until a re-base replaces it
 * (`--rebase-every`), which loses the versions before. With
 * `--replay-versions N` the driver mirrors the live object, publication by
 * publication, into chains of its own (`runs/<name>/history/v<base>`): a
 * patch is appended to the current chain, a new base starts the next one, so
 * a chain outlives its re-base. Chains whose last version is more than N
 * behind are deleted. A replay looks for a version in the live object, then
 * in these. What they hold is shown (`bytes()`); a version outside them is a
 * clear error saying how to keep more.
 *
 * Cost: each publication travels once more (head → driver → head), and the
 * kept chains hold their bytes in the cache.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fromFile, fromParts, fromStream, type LocalPart, type StreamedValue } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import { historyKey } from "../state/run-objects.js";

/** One kept chain: its key, the versions it holds, and their bytes. */
export interface KeptChain {
  key: string;
  first: number;
  last: number;
  bytes: number;
}

/** The kept chains of a run (see the file's header). */
export class WeightHistory {
  private readonly chains: KeptChain[] = [];
  /** The live object's cache version mirrored so far. */
  private mirrored?: { version: number; baseVersion: number };

  constructor(
    private readonly app: App,
    private readonly run: string,
    private readonly liveKey: string,
    /** Versions to keep behind the latest (0: none beyond the live object). */
    readonly window: number,
  ) {}

  /** Mirrors what the live object gained since the last call (publication `version` is its newest); chains past the window go. */
  async record(version: number): Promise<void> {
    if (this.window <= 0) return;
    const scratch = mkdtempSync(path.join(os.tmpdir(), "hearth-history-"));
    try {
      const r = await this.app.objects.getParts(this.liveKey, { dir: scratch, ...(this.mirrored ? { have: this.mirrored } : { full: true }) });
      if (r.mode !== "not-modified") {
        const bytes = r.parts.reduce((n, p) => n + p.size, 0);
        if (r.mode === "full") {
          // A new base: the chain before it is complete; this one starts at the base's publication version.
          const base = r.parts.filter((p) => p.version === r.baseVersion);
          const first = version - (r.parts.length - base.length);
          const chain: KeptChain = { key: historyKey(this.run, first), first, last: version, bytes };
          await this.app.objects.put(fromParts(base.map(streamed)), { key: chain.key });
          for (const p of r.parts.filter((x) => x.version !== r.baseVersion)) await this.app.objects.patch(chain.key, streamed(p));
          this.chains.push(chain);
        } else {
          const chain = this.chains.at(-1)!;
          for (const p of r.parts) await this.app.objects.patch(chain.key, streamed(p));
          chain.last = version;
          chain.bytes += bytes;
        }
        this.mirrored = { version: r.version, baseVersion: r.baseVersion };
      }
      while (this.chains.length > 1 && this.chains[0]!.last < version - this.window) await this.app.objects.delete(this.chains.shift()!.key);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }

  /** The kept chains' keys, newest first. */
  keys(): string[] {
    return this.chains.map((c) => c.key).reverse();
  }

  /** The versions kept, as [first, last] ranges, oldest first. */
  ranges(): Array<[number, number]> {
    return this.chains.map((c) => [c.first, c.last]);
  }

  /** Bytes the kept chains hold. */
  bytes(): number {
    return this.chains.reduce((n, c) => n + c.bytes, 0);
  }
}

/** A part read back as something to write again: its file, or its bytes. */
function streamed(p: LocalPart): StreamedValue {
  if (p.file) return fromFile(p.file);
  const data = p.data!;
  return fromStream((async function* () {
    yield data;
  })());
}
