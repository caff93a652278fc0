/**
 * Checkpoint I/O of a run: the standalone checkpoint (`model/` a complete
 * Hugging Face folder, `state/` the exact trainer state, `driver-state.json`
 * the step and history), reading it back for `--resume`, and the
 * `checkpoint.json` that names the cache objects a run is using.
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { dropFolder, fetchFolder } from "../../cache/folder.js";
import type { ObjectRef } from "../../cache/object-cache.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle } from "../../runtime/handles.js";
import { HearthError } from "../../errors/index.js";
import type { StepMetrics } from "../run/pipeline.js";
import type { TextTokenizer } from "../text/tokenizer.js";
import type { TrainerService } from "../services/trainer-service.js";

/** What `driver-state.json` holds. */
export interface DriverState {
  step: number;
  history: StepMetrics[];
  options?: Record<string, unknown>;
}

/**
 * Asks rank 0 to write its model (and, with `state`, the exact trainer state)
 * under `dir`: straight there when it runs on this host, otherwise shipped
 * back file by file and written here.
 */
export async function saveTrainerFolders(app: App, trainer: GangHandle<TrainerService>, dir: string, state: boolean): Promise<void> {
  const abs = path.resolve(dir);
  const target = { host: os.hostname(), dir: abs, state };
  const saved = await trainer.broadcast("save", Array.from({ length: trainer.size }, () => [target] as [typeof target]));
  const rank0 = saved.find((s) => s.rank === 0);
  if (!rank0) throw new HearthError("the trainer gang has no rank 0 answer to save");
  if (rank0.inPlace) return;
  for (const [sub, ref] of [["model", rank0.model], ["state", rank0.state]] as const) {
    if (!ref) continue;
    await fetchFolder(app.objects, ref, path.join(abs, sub));
    await dropFolder(app.objects, ref);
  }
  await trainer.callRank(0, "dropScratch");
}

/**
 * Makes `model/` a complete Hugging Face folder: the tokenizer's files and a
 * generation_config.json with the end-of-turn ids beside the weights, so it
 * loads back with `--model` (and with transformers).
 */
export function completeModelFolder(modelDir: string, tokenizer: TextTokenizer): void {
  for (const [name, data] of Object.entries(tokenizer.files)) writeFileSync(path.join(modelDir, name), data);
  if (!("generation_config.json" in tokenizer.files)) {
    const eos = tokenizer.eosIds;
    const doc = { eos_token_id: eos.length === 1 ? eos[0] : eos, do_sample: true, temperature: 1.0, top_p: 1.0 };
    writeFileSync(path.join(modelDir, "generation_config.json"), `${JSON.stringify(doc, null, 2)}\n`);
  }
}

/** Writes a standalone checkpoint under `dir`. */
export async function writeStandaloneCheckpoint(
  app: App,
  trainer: GangHandle<TrainerService>,
  dir: string,
  tokenizer: TextTokenizer,
  driver: DriverState,
): Promise<string> {
  await saveTrainerFolders(app, trainer, dir, true);
  completeModelFolder(path.join(dir, "model"), tokenizer);
  writeFileSync(path.join(dir, "driver-state.json"), JSON.stringify(driver, null, 2));
  return dir;
}

/** Reads `driver-state.json` of a checkpoint folder and checks its model/ and state/ are there. */
export function readResume(dir: string): DriverState {
  for (const need of ["driver-state.json", "model/config.json", "state"]) {
    if (!existsSync(path.join(dir, need))) throw new HearthError(`--resume ${dir}: no ${need} there (expected a folder written by a previous run's checkpoint)`);
  }
  try {
    const d = JSON.parse(readFileSync(path.join(dir, "driver-state.json"), "utf8")) as DriverState;
    if (!Number.isInteger(d.step) || !Array.isArray(d.history)) throw new Error("expected { step, history }");
    return d;
  } catch (err) {
    throw new HearthError(`--resume ${dir}: driver-state.json is not valid (${(err as Error).message})`);
  }
}

/** Writes `<out>/checkpoint.json`: the app, the weights object, the rollout setup and the last step's trajectories. */
export function writeCheckpointJson(out: string, doc: { step: number; app: string; weightsKey: string; rolloutSetup: ObjectRef; lastTrajectories: ObjectRef[] }): void {
  const standalone = path.join(out, "checkpoint");
  writeFileSync(
    path.join(out, "checkpoint.json"),
    JSON.stringify(
      {
        step: doc.step,
        app: doc.app,
        weights: { key: doc.weightsKey },
        rolloutSetup: doc.rolloutSetup,
        lastTrajectories: doc.lastTrajectories,
        standalone: existsSync(standalone) ? standalone : null,
      },
      null,
      2,
    ),
  );
}
