/**
 * Runs a warm start (supervised steps on a recipe's demonstrations) on the
 * trainer gang and writes the result as a Hugging Face folder (config.json,
 * model.safetensors, the task's tokenizer files) with a manifest,
 * `warmstart.json`, that names the recipe, the hash of everything the result
 * depends on, the seed and the command that made it. The same code makes the
 * policy a recipe ships (`hearth warmstart`), the short one a test makes, and
 * the one a run with custom warm-start options caches under
 * HEARTH_HOME/bootstrap/<hash>.
 */
import { createHash } from "node:crypto";
import { closeSync, existsSync, openSync, readFileSync, readSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ObjectRef } from "../../cache/object-cache.js";
import { completeModelFolder, saveTrainerFolders } from "../state/checkpoint.js";
import { hearthHome } from "../../engines/local.js";
import type { App } from "../../runtime/app.js";
import type { GangHandle } from "../../runtime/handles.js";
import { HearthError } from "../../errors/index.js";
import { buildSlices } from "../scoring/batch.js";
import { backendFor, threadsFor, type RecipeDefaults, type RunOptions } from "./options.js";
import type { Demo } from "../types.js";
import type { PreparedTask, TaskRecipe, WarmStartContext } from "./recipe.js";
import type { TrainerService, TrainerSetup } from "../services/trainer-service.js";
import { warmStartKey } from "../state/run-objects.js";

/** Rows per forward of a warm-start step: each rank's rows arrive longest first (buildSlices), and the engine drops a micro-batch's columns past its last trained token, so smaller micro-batches carry less padding. */
const SFT_MICRO_BATCH = 8;

/** A phase of a warm start. */
export interface WarmStartPhase {
  /** Steps of the phase (at most, when it has `convergeNll`). */
  steps: number;
  /** The demonstrations of global step `step` (a seeded draw: the same for the same step). */
  demos: (step: number, n: number) => Demo[];
  /** The phase ends early (after at least 100 steps) once the mean token NLL of its last 25 steps is under this. */
  convergeNll?: number;
}

/** What a recipe's warm start is: its phases and everything its result depends on. */
export interface WarmStartPlan {
  recipe: string;
  /** Everything the result depends on (hashed, and written in the manifest): change any of it and the policy is another. */
  material: Record<string, unknown>;
  phases: WarmStartPhase[];
  batch: number;
  lr: number;
  seed: number;
}

/** The manifest of a warm-start folder (`warmstart.json`). */
export interface WarmStartManifest {
  recipe: string;
  /** planHash of the plan that made it. */
  hash: string;
  material: Record<string, unknown>;
  seed: number;
  /** Steps run (a phase may have ended early). */
  steps: number;
  /** Mean token NLL of the last 25 steps. */
  nll: number;
  seconds: number;
  /**
   * The BLAS library the trainer's torch multiplied with (informational, not in the hash): the same
   * plan on another BLAS (Debian's reference one against OpenBLAS) gives other bits, so two policies
   * that differ are first compared on this.
   */
  blas?: string;
  command: string;
  created: string;
  /**
   * Set when the manifest's fingerprint (`hash`, `material`) was computed again
   * for the same weights after the fingerprint's format changed, not by the
   * warm start that made them: when, the hash it had before, and why the
   * weights still are what the new material describes.
   */
  fingerprinted?: { at: string; previous: string; why: string };
  /** sha256 of every file of the folder but the manifest. */
  files: Record<string, string>;
}

/** The manifest's file name. */
export const MANIFEST = "warmstart.json";

/** How many of a plan's first warm-start batches `demosDigest` covers (by default): 512 demonstrations of the chain recipe, ~0.1 s to make. */
export const DIGESTED_BATCHES = 16;

/**
 * The sha256 (16 hex digits) of the demonstrations of a plan's first
 * `batches` steps (tokens and masks, across phases): a recipe's material
 * carries it, so a change in the code that makes demonstrations (or in the
 * protocol text, the task or the retrieval they are made of) changes the
 * hash, not only a change in a declared setting. A change that only touches
 * demonstrations past those batches is not seen.
 */
export function demosDigest(phases: readonly WarmStartPhase[], batch: number, batches = DIGESTED_BATCHES): string {
  const h = createHash("sha256");
  let step = 0;
  for (const phase of phases) {
    for (let i = 0; i < phase.steps && step < batches; i++, step++) {
      for (const d of phase.demos(step, batch)) h.update(JSON.stringify([d.tokens, d.mask]));
      h.update("\n");
    }
  }
  return h.digest("hex").slice(0, 16);
}

/** The sha256 (16 hex digits) of a value's JSON: what a recipe's material records of its protocol text and its task. */
export function jsonDigest(value: unknown): string {
  return createHash("sha256").update(JSON.stringify(value)).digest("hex").slice(0, 16);
}

/** The hash of a plan's material (what the manifest records and a run checks). */
export function planHash(plan: WarmStartPlan): string {
  return createHash("sha256").update(JSON.stringify(plan.material)).digest("hex").slice(0, 16);
}

/** A file's sha256, read 8 MiB at a time (readFileSync stops at 2 GiB, and a model's shard may be larger). */
function sha256(file: string): string {
  const h = createHash("sha256");
  const buf = Buffer.allocUnsafe(8 * 1024 * 1024);
  const fd = openSync(file, "r");
  try {
    for (let n = readSync(fd, buf, 0, buf.length, null); n > 0; n = readSync(fd, buf, 0, buf.length, null)) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return h.digest("hex");
}

/** The sha256 of every file of `dir` but the manifest. */
export function folderDigests(dir: string): Record<string, string> {
  return Object.fromEntries(
    readdirSync(dir)
      .filter((n) => n !== MANIFEST)
      .sort()
      .map((n) => [n, sha256(path.join(dir, n))]),
  );
}

/** Reads a folder's manifest, or says what is wrong with it. */
export function readManifest(dir: string): WarmStartManifest {
  const file = path.join(dir, MANIFEST);
  if (!existsSync(file)) throw new HearthError(`${dir}: no ${MANIFEST} (not a warm start made by 'hearth warmstart')`);
  try {
    return JSON.parse(readFileSync(file, "utf8")) as WarmStartManifest;
  } catch (err) {
    throw new HearthError(`${file}: not a readable manifest (${(err as Error).message})`, { cause: err });
  }
}

/**
 * Checks that the warm start in `dir` was made by `plan` and is intact: a
 * changed recipe never silently uses a stale policy. `regenerate` is the
 * command that makes it again (said in the error).
 */
export function checkWarmStart(dir: string, plan: WarmStartPlan, regenerate: string): WarmStartManifest {
  const m = readManifest(dir);
  const hash = planHash(plan);
  if (m.recipe !== plan.recipe || m.hash !== hash) {
    const changed = Object.keys({ ...m.material, ...plan.material }).filter((k) => JSON.stringify(m.material?.[k]) !== JSON.stringify(plan.material[k]));
    throw new HearthError(
      `the warm start in ${dir} was made by recipe ${m.recipe} ${m.hash}, but this code's recipe is ${plan.recipe} ${hash} (changed: ${changed.join(", ") || "the recipe name"}): ` +
        `it would be a stale policy. Regenerate it with \`${regenerate}\`, or pass --bootstrap-steps N to make a warm start for this run`,
    );
  }
  const now = folderDigests(dir);
  for (const [name, digest] of Object.entries(m.files)) {
    if (now[name] !== digest) throw new HearthError(`${path.join(dir, name)} ${now[name] ? "differs from" : "is missing, unlike"} what ${MANIFEST} records: regenerate it with \`${regenerate}\``);
  }
  return m;
}

/** Progress of a warm start. */
export type WarmStartProgress = (e: { step: number; total: number; nll: number }) => void;

/**
 * Runs `plan` on the trainer gang and writes the folder and its manifest to
 * `dir` (replaced whole, atomically). Rank 0 steps alone on each batch (see
 * TrainerService.sft).
 */
export async function makeWarmStart(
  app: App,
  trainer: GangHandle<TrainerService>,
  task: PreparedTask,
  plan: WarmStartPlan,
  o: Pick<RunOptions, "trainers" | "trainerResreq" | "threads" | "backend" | "log">,
  dir: string,
  command: string,
  onStep?: WarmStartProgress,
): Promise<WarmStartManifest> {
  const t0 = performance.now();
  const hash = planHash(plan);
  const total = plan.phases.reduce((n, p) => n + p.steps, 0);
  const setup: TrainerSetup = {
    model: { ...task.model, seed: plan.seed },
    trainer: { lr: plan.lr, klCoef: 0, microBatchSize: SFT_MICRO_BATCH, gradClip: 1.0, ...task.trainer },
    weights: warmStartKey(hash),
    threads: threadsFor(o as RunOptions, o.trainerResreq),
    backend: backendFor(o as RunOptions),
  };
  // Scratch, like the batches below: deleted at once, or by the head with the app if this driver vanishes first.
  const setupRef = await app.objects.put(setup, { scratch: true });
  const ready = await trainer.broadcast("setup", Array.from({ length: o.trainers }, () => [setupRef, "sft"] as [ObjectRef, "sft"]));
  await app.objects.delete(setupRef.key);
  const blas = ready.find((r) => r.rank === 0)?.blas;
  const recent: number[] = [];
  let step = 0;
  let left = total;
  for (const phase of plan.phases) {
    recent.length = 0;
    for (let i = 0; i < phase.steps; i++, step++, left--) {
      // Made per step (cheap), so the driver never blocks long enough to miss its heartbeats.
      const rows = phase.demos(step, plan.batch).map((d) => ({ tokens: d.tokens, mask: d.mask, advantage: 1 }));
      const ref = await app.objects.put(buildSlices(rows, 1)[0]!, { scratch: true });
      const res = await trainer.broadcast("sft", Array.from({ length: o.trainers }, (_, rank) => [rank === 0 ? ref : null, true] as [ObjectRef | null, boolean]));
      await app.objects.delete(ref.key);
      const nll = res.find((r) => r.rank === 0)!.metrics.nll ?? NaN;
      recent.push(nll);
      if (recent.length > 25) recent.shift();
      onStep?.({ step: step + 1, total: step + left, nll });
      const mean = recent.reduce((a, b) => a + b, 0) / recent.length;
      if (phase.convergeNll !== undefined && i + 1 >= 100 && recent.length === 25 && mean < phase.convergeNll) {
        o.log(`warm start: a phase converged after ${i + 1} of ${phase.steps} steps (mean token NLL under ${phase.convergeNll})`);
        left -= phase.steps - i;
        step++;
        break;
      }
    }
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  await saveTrainerFolders(app, trainer, tmp, false);
  const model = path.join(tmp, "model");
  completeModelFolder(model, task.tokenizer);
  const manifest: WarmStartManifest = {
    recipe: plan.recipe,
    hash,
    material: plan.material,
    seed: plan.seed,
    steps: step,
    nll: recent.reduce((a, b) => a + b, 0) / Math.max(1, recent.length),
    seconds: Math.round((performance.now() - t0) / 100) / 10,
    blas,
    command,
    created: new Date().toISOString(),
    files: folderDigests(model),
  };
  writeFileSync(path.join(model, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(model, dir);
  rmSync(tmp, { recursive: true, force: true });
  o.log(`warm start: ${step} steps in ${manifest.seconds} s, written to ${dir}`);
  return manifest;
}

/**
 * The warm start of a run whose warm-start options differ from its recipe's
 * shipped policy: made once, then cached under HEARTH_HOME/bootstrap/<hash>.
 */
export async function cachedWarmStart(app: App, trainer: GangHandle<TrainerService>, task: PreparedTask, plan: WarmStartPlan, o: RunOptions): Promise<string> {
  const dir = path.join(hearthHome(), "bootstrap", planHash(plan));
  const total = plan.phases.reduce((n, p) => n + p.steps, 0);
  if (existsSync(path.join(dir, MANIFEST))) {
    o.log(`warm start: using the cached ${dir}`);
    o.onEvent?.({ type: "warmstart", step: total, total, cached: true });
    return dir;
  }
  o.log(`warm start: ${total} supervised steps on demonstrations (made once, cached in ${dir})`);
  await makeWarmStart(app, trainer, task, plan, o, dir, "a run's custom warm start", (e) => o.onEvent?.({ type: "warmstart", ...e }));
  return dir;
}

/** The repository's folder of shipped policies (found from this file, in dist/ or in the sources). */
export function policiesDir(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    if (existsSync(path.join(dir, "policies")) && existsSync(path.join(dir, "package.json"))) return path.join(dir, "policies");
    const up = path.dirname(dir);
    if (up === dir) throw new HearthError(`no policies/ folder above ${fileURLToPath(import.meta.url)}: the shipped starting policies live in the hearth checkout`);
    dir = up;
  }
}

/**
 * The starting policy of a run whose recipe ships one: unless the run asks
 * for a warm start of its own (a plan other than the shipped one's) or none
 * (--bootstrap-steps 0), `--policy DIR` or else the shipped folder, checked
 * against the plan before any service starts (a stale one names `regenerate`).
 */
export function startingPolicy<T extends PreparedTask>(task: T, o: RunOptions, plans: { run: WarmStartPlan; shipped: WarmStartPlan }, shippedDir: string, regenerate: string): T {
  if (o.bootstrapSteps <= 0) return task;
  const custom = planHash(plans.run) !== planHash(plans.shipped);
  if (custom && o.policy === undefined) return task;
  const dir = o.policy ?? shippedDir;
  const m = checkWarmStart(dir, plans.run, o.policy === undefined ? regenerate : `${regenerate} --out ${o.policy}${custom ? ` --steps ${o.bootstrapSteps}` : ""}`);
  task.notes.push(`starting policy: ${o.policy === undefined ? "the shipped" : "the given"} ${dir} (recipe ${m.recipe} ${m.hash}, ${m.steps} supervised steps)`);
  return { ...task, modelDir: dir };
}

/** An environment's shipped starting policy: how its task is prepared and its warm start planned, and where it lives. */
export interface ShippedPolicy<T extends PreparedTask = PreparedTask> {
  /** Its recipe's option defaults (the shipped policy is the plan of these). */
  defaults: RecipeDefaults;
  prepare(o: RunOptions): T;
  plan(task: T, o: RunOptions): WarmStartPlan;
  /** Its folder (under policies/). */
  dir(): string;
}

/**
 * A recipe whose runs start from a shipped policy (`policy`): `prepare`
 * picks and checks it (startingPolicy), and a run whose warm start differs
 * (other --bootstrap-* flags) makes its own, cached under HEARTH_HOME.
 * `regenerate` is the command said for a stale shipped policy, `warmstart`
 * the one for a given --policy.
 */
export function shippedRecipe<T extends PreparedTask>(r: { name: string; defaults: RecipeDefaults; matches: TaskRecipe["matches"]; policy: ShippedPolicy<T>; regenerate: string; warmstart: string }): TaskRecipe<T> {
  return {
    name: r.name,
    defaults: r.defaults,
    matches: r.matches,
    async prepare(o) {
      const task = r.policy.prepare(o);
      if (o.bootstrapSteps <= 0) return task;
      return startingPolicy(task, o, { run: r.policy.plan(task, o), shipped: r.policy.plan(task, { ...o, ...r.defaults }) }, r.policy.dir(), o.policy === undefined ? r.regenerate : r.warmstart);
    },
    async warmStart(ctx: WarmStartContext<T>): Promise<string | undefined> {
      if (ctx.opts.bootstrapSteps <= 0 || ctx.task.modelDir) return undefined;
      return cachedWarmStart(ctx.app, ctx.trainer, ctx.task, r.policy.plan(ctx.task, ctx.opts), ctx.opts);
    },
  };
}

/** A warm-start plan of supervised phases: `material` with the warm start's own settings (steps, batch, lr, seed) added last, which the manifest hashes. */
export function supervisedPlan(recipe: string, material: Record<string, unknown>, phases: WarmStartPhase[], o: Pick<RunOptions, "bootstrapSteps" | "bootstrapBatch" | "bootstrapLr">, seed: number): WarmStartPlan {
  return {
    recipe,
    material: { ...material, steps: o.bootstrapSteps, batch: o.bootstrapBatch, lr: o.bootstrapLr, seed },
    phases,
    batch: o.bootstrapBatch,
    lr: o.bootstrapLr,
    seed,
  };
}
