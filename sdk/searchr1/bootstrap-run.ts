/**
 * Runs the bootstrap on the trainer gang (supervised steps on demonstrations)
 * and caches the result under HEARTH_HOME/bootstrap/<hash>, so it is made once
 * per task, vocabulary, model shape and recipe.
 */
import { createHash } from "node:crypto";
import { existsSync, renameSync, rmSync } from "node:fs";
import path from "node:path";
import type { ObjectRef } from "../cache/object-cache.js";
import { saveTrainerFolders } from "./checkpoint.js";
import { hearthHome } from "../engines/local.js";
import type { App } from "../runtime/app.js";
import type { GangHandle } from "../runtime/handles.js";
import { buildSlices } from "./batch.js";
import { backendFor, threadsFor, type SearchR1Options } from "./options.js";
import { Bm25Index } from "./bm25.js";
import { DEFAULT_MIX, SEARCH_ALWAYS, demonstrations } from "./bootstrap.js";
import type { PreparedTask } from "./recipe.js";
import type { SyntheticTask } from "./synthetic.js";
import type { SearchR1Trainer, TrainerSetup } from "./trainer-service.js";

/** The always-search phase has converged once the mean token NLL of its last 25 steps is under this. */
const CONVERGED_NLL = 0.05;

/** Rows per forward of a warm-start step: each rank's rows arrive longest first (buildSlices), and the engine drops a micro-batch's columns past its last trained token, so smaller micro-batches carry less padding. */
const SFT_MICRO_BATCH = 8;

/** Returns the folder of the bootstrapped weights (HF layout), making them if not cached. */
export async function runBootstrap(app: App, trainer: GangHandle<SearchR1Trainer>, task: PreparedTask, synthetic: SyntheticTask, o: SearchR1Options): Promise<string> {
  const batch = o.bootstrapBatch;
  const lr = o.bootstrapLr;
  const mixedSteps = Math.round(o.bootstrapSteps * o.bootstrapMixedShare);
  const recipe = { v: 7, converged: CONVERGED_NLL, task: task.describe, vocab: task.tokenizer.size, model: task.model, extras: task.trainer, mix: [SEARCH_ALWAYS, DEFAULT_MIX], mixedSteps, steps: o.bootstrapSteps, batch, lr, seed: o.seed };
  const hash = createHash("sha256").update(JSON.stringify(recipe)).digest("hex").slice(0, 16);
  const dir = path.join(hearthHome(), "bootstrap", hash);
  if (existsSync(path.join(dir, "config.json"))) {
    o.log(`bootstrap: using the cached warm start ${dir}`);
    o.onEvent?.({ type: "warmstart", step: o.bootstrapSteps, total: o.bootstrapSteps, cached: true });
    return dir;
  }
  o.log(`bootstrap: ${o.bootstrapSteps} supervised steps on demonstrations (made once, cached in ${dir})`);
  const t0 = performance.now();
  const setup: TrainerSetup = {
    model: { ...task.model, seed: o.seed },
    trainer: { lr, klCoef: 0, microBatchSize: SFT_MICRO_BATCH, gradClip: 1.0, ...task.trainer },
    weights: `searchr1/bootstrap-${hash}/weights`,
    threads: threadsFor(o, o.trainerResreq),
    backend: backendFor(o),
  };
  const setupRef = await app.objects.put(setup);
  await trainer.broadcast("setup", Array.from({ length: o.trainers }, () => [setupRef, "sft"] as [ObjectRef, "sft"]));
  const index = Bm25Index.build(task.corpus);
  // Phase 1 always searches (copying is learned); phase 2 mixes in poor behaviour, so RL starts
  // from a policy that knows the protocol but searches only some question kinds.
  const retrieve = (q: string, k: number) => index.search(q, k);
  // Phase 1 ends early once it has converged (mean NLL of the last 25 steps under CONVERGED_NLL): the
  // always-search demonstrations are then learned, and more steps of them change nothing.
  const recent: number[] = [];
  let phase1 = o.bootstrapSteps - mixedSteps;
  for (let step = 0; step < phase1 + mixedSteps; step++) {
    // Made per step (cheap), so the driver never blocks long enough to miss its heartbeats.
    const mix = step < phase1 ? SEARCH_ALWAYS : DEFAULT_MIX;
    const demos = demonstrations(synthetic, task.tokenizer, task.text, retrieve, batch, o.seed * 1_000_003 + step, mix);
    const rows = demos.map((d) => ({ tokens: d.tokens, mask: d.mask, advantage: 1 }));
    // Rank 0 steps alone on the whole batch (see SearchR1Trainer.sft): measured on 2 cores, a
    // 2-rank gloo step of this model took 126 ms against 89 ms for one rank on all 32 rows.
    const ref = await app.objects.put(buildSlices(rows, 1)[0]!);
    const res = await trainer.broadcast("sft", Array.from({ length: o.trainers }, (_, rank) => [rank === 0 ? ref : null, true] as [ObjectRef | null, boolean]));
    await app.objects.delete(ref.key);
    const nll = res.find((r) => r.rank === 0)!.metrics.nll ?? NaN;
    if (step < phase1) {
      recent.push(nll);
      if (recent.length > 25) recent.shift();
      if (step + 1 >= 100 && recent.length === 25 && recent.reduce((a, b) => a + b, 0) / 25 < CONVERGED_NLL) {
        o.log(`bootstrap: the always-search phase converged after ${step + 1} steps (mean token NLL under ${CONVERGED_NLL}); mixed demonstrations follow`);
        phase1 = step + 1;
      }
    }
    o.onEvent?.({ type: "warmstart", step: step + 1, total: phase1 + mixedSteps, nll });
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  await saveTrainerFolders(app, trainer, tmp, false);
  rmSync(dir, { recursive: true, force: true });
  renameSync(path.join(tmp, "model"), dir);
  rmSync(tmp, { recursive: true, force: true });
  o.log(`bootstrap: done in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  return dir;
}
