/**
 * The embedded default's recipe: the chain task (chain-task.ts: questions
 * needing one, two or three chained searches) on the tiny preset, with a
 * shipped starting policy. The warm start teaches the protocol and single
 * searches and shows a further hop only rarely (CHAIN_EXPLORE), so RL has to
 * discover chaining; the policy it makes ships in policies/tiny-chain (made by
 * `npm run warmstart`) and a run starts from it in seconds.
 */
import path from "node:path";
import { Bm25Index } from "../retrieval/bm25.js";
import { chainDemonstrations } from "../demonstrations.js";
import { demosDigest, jsonDigest, policiesDir, shippedRecipe, supervisedPlan, type ShippedPolicy, type WarmStartPlan } from "../../../rl/run/warm-start.js";

export { policiesDir };
import { chainTask, type ChainQuestion, type ChainTask } from "../tasks/chain-task.js";
import type { RecipeDefaults, RunOptions } from "../../../rl/run/options.js";
import type { TaskRecipe } from "../../../rl/run/recipe.js";
import { withSearchEnvironment, type SearchR1Task } from "../task.js";
import { rng } from "../tasks/synthetic.js";
import { tokenizerFromJson, wordTokenizerJson } from "../../../rl/text/tokenizer.js";
import { HearthError } from "../../../errors/index.js";
import { PROTOCOL_WORDS, SYNTHETIC_TEXT, TINY_SYNTHETIC_PRESET } from "./synthetic.js";
import { createHash } from "node:crypto";

/** The recipe's name (also the shipped policy's folder under policies/). */
export const CHAIN_RECIPE = "tiny-chain";

/** The world is fixed (the vocabulary, and so the shipped policy, depend on it); --seed varies the run, not the world. */
const WORLD = { seed: 1, people: 1200, heldOut: 200 };

/**
 * Probability that a warm-start demonstration searches the name it just read
 * instead of answering it, after its first and its second search: a full
 * two-hop chain is shown in 2 % of the demonstrations that need one, a full
 * three-hop chain in 1 %. (With 5 % after the second search too, RL never
 * found the third hop within 100 steps: measured.)
 */
export const CHAIN_EXPLORE: readonly number[] = [0.02, 0.5];

/**
 * Layers of the tiny preset for this task (the preset has 2): how many searches
 * a question needs depends on one word of it ("birth country" against "birth
 * continent"), and with 2 layers the policy chained the wrong number of times
 * for one of the two kinds (measured: the other collapsed as one was learned).
 */
const CHAIN_LAYERS = 4;

/** Share of warm-start demonstrations that are single-search questions about a city or a country. */
const ENTITY_SHARE = 0.25;

/** The command that regenerates the shipped policy (said in errors). */
export const REGENERATE = "npm run warmstart";

/** Option defaults: the generic ones (options.ts) plus the warm start's and the step count that ends near the plateau. */
const DEFAULTS: RecipeDefaults = { steps: 100, bootstrapSteps: 1200, bootstrapBatch: 32, bootstrapLr: 3e-3, threads: 1 };

/** The folder of this recipe's shipped policy. */
export function shippedPolicy(): string {
  return path.join(policiesDir(), CHAIN_RECIPE);
}

/**
 * The warm start of `task` with options `o` (the shipped policy is the plan of
 * the recipe's defaults). Its material, hashed into the manifest, covers what
 * the policy is trained on, not only the declared settings: a digest of the
 * protocol text, of the task (corpus and the questions demonstrations are drawn
 * from) and of the first batches of demonstrations (`demosDigest`), so a
 * change to `chainDemonstrations`, chain-task.ts or the protocol's words
 * makes the shipped policy stale. `demonstrate` makes the demonstrations
 * (tests swap it to stand for a change to that code).
 */
export function chainPlan(
  task: SearchR1Task,
  o: Pick<RunOptions, "bootstrapSteps" | "bootstrapBatch" | "bootstrapLr">,
  demonstrate: typeof chainDemonstrations = chainDemonstrations,
): WarmStartPlan {
  const world = task.extra as ChainTask;
  const index = Bm25Index.build(task.corpus);
  const retrieve = (q: string, k: number) => index.search(q, k);
  const seed = 1;
  const tokenizer = createHash("sha256").update(task.tokenizer.files["tokenizer.json"]!).digest("hex").slice(0, 16);
  const phases: WarmStartPlan["phases"] = [
    {
      steps: o.bootstrapSteps,
      demos: (step, n) => {
        const r = rng(seed * 7919 + step);
        const entity = Array.from({ length: n }, () => r() < ENTITY_SHARE).filter(Boolean).length;
        const s = seed * 1_000_003 + step;
        return [
          ...demonstrate(world.entityQuestions, task.tokenizer, task.text, retrieve, entity, s, CHAIN_EXPLORE),
          ...demonstrate(world.train, task.tokenizer, task.text, retrieve, n - entity, s + 1, CHAIN_EXPLORE),
        ];
      },
    },
  ];
  // What demonstrations are drawn from: each question's words and solution path, and the passages (not labels such as its category).
  const drawn = (qs: readonly ChainQuestion[]) => qs.map((q) => [q.question, q.hops]);
  const taskDigest = jsonDigest({ corpus: world.corpus, train: drawn(world.train), entityQuestions: drawn(world.entityQuestions) });
  return supervisedPlan(
    CHAIN_RECIPE,
    {
      v: 2,
      world: WORLD,
      tokenizer,
      protocol: jsonDigest(task.text),
      task: taskDigest,
      demos: demosDigest(phases, o.bootstrapBatch),
      model: task.model,
      trainer: task.trainer ?? {},
      explore: CHAIN_EXPLORE,
      entityShare: ENTITY_SHARE,
    },
    phases,
    o,
    seed,
  );
}

/** Prepares the chain task (shared by the run and `hearth warmstart`). */
export function prepareChain(o: Pick<RunOptions, "data" | "evalSize" | "topK">): SearchR1Task {
  if (o.data !== "synthetic") {
    throw new HearthError(`--data ${o.data}: the tiny preset's word-level vocabulary only covers the synthetic tasks (synthetic, synthetic-easy); pass a Hugging Face model folder (--model DIR, e.g. one made by 'hearth model init')`);
  }
  if (o.evalSize > WORLD.heldOut) throw new HearthError(`--eval-size ${o.evalSize}: the synthetic task holds out ${WORLD.heldOut} questions; ask for at most that many`);
  const task = chainTask(WORLD);
  const tokenizer = tokenizerFromJson(wordTokenizerJson([...task.words, ...PROTOCOL_WORDS]));
  return withSearchEnvironment({
    recipe: CHAIN_RECIPE,
    train: task.train,
    heldOut: task.heldOut.slice(0, o.evalSize),
    corpus: task.corpus,
    tokenizer,
    text: SYNTHETIC_TEXT,
    model: { config: TINY_SYNTHETIC_PRESET, overrides: { vocab_size: tokenizer.size, num_hidden_layers: CHAIN_LAYERS } },
    // Frozen random (tied) embeddings make every name look alike to the network, so copying
    // learned on training names also works for held-out names it never saw.
    trainer: { freezeEmbeddings: true, embeddingRms: 0.5 },
    describe: `synthetic chain task: ${task.train.length} training questions needing 1–3 chained searches, ${Math.min(o.evalSize, task.heldOut.length)} held-out, ${task.corpus.length} passages`,
    notes: [],
    extra: task,
  }, o.topK);
}

/** The shipped policy of the chain task (`hearth warmstart`). */
export const CHAIN_POLICY: ShippedPolicy<SearchR1Task> = { defaults: DEFAULTS, prepare: prepareChain, plan: (task, o) => chainPlan(task, o), dir: shippedPolicy };

/**
 * The chain task on the tiny preset, from its shipped policy: unless the run
 * asks for a warm start of its own (other --bootstrap-steps, batch or lr) or
 * none (--bootstrap-steps 0), `prepare` picks and checks the starting policy
 * (--policy, else the shipped one) before any service starts.
 */
export const chainRecipe: TaskRecipe<SearchR1Task> = shippedRecipe({
  name: CHAIN_RECIPE,
  defaults: DEFAULTS,
  matches: (model, data) => model === "tiny" && data !== "synthetic-easy",
  policy: CHAIN_POLICY,
  regenerate: REGENERATE,
  warmstart: "hearth warmstart",
});
