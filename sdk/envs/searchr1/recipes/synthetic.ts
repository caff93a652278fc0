/**
 * The embedded default's recipe: the synthetic search task (synthetic.ts), a
 * word-level vocabulary generated from its words, a 2-layer 64-wide model
 * with frozen, rescaled random embeddings, the spaced protocol text that
 * vocabulary can spell, and a cached supervised warm start.
 */
import { Bm25Index } from "../retrieval/bm25.js";
import { DEFAULT_MIX, SEARCH_ALWAYS, demonstrations } from "../demonstrations.js";
import { cachedWarmStart, type WarmStartPlan } from "../../../rl/run/warm-start.js";
import type { RecipeDefaults, RunOptions } from "../../../rl/run/options.js";
import type { ProtocolText } from "../protocol.js";
import type { TaskRecipe, WarmStartContext } from "../../../rl/run/recipe.js";
import { withSearchEnvironment, type SearchR1Task } from "../task.js";
import { syntheticTask, type SyntheticTask } from "../tasks/synthetic.js";
import { tokenizerFromJson, wordTokenizerJson } from "../../../rl/text/tokenizer.js";

/** The protocol in words the word-level vocabulary holds (tokens are separated by spaces). */
export const SYNTHETIC_TEXT: ProtocolText = {
  instruction:
    "answer the question . you can search : write <search> words </search> and the results come back inside <information> </information> . " +
    "think inside <think> </think> . give the final answer inside <answer> </answer> .",
  question: "question : {question}",
  passage: "( {i} ) {title} : {text}",
  passageSeparator: " ",
  informationOpen: "<information> ",
  informationClose: " </information>",
  insertBefore: " ",
  insertAfter: " ",
  invalid: "invalid action : search with <search> words </search> or answer with <answer> words </answer> .",
  limit: "no more searches : give the answer now .",
  empty: "no results .",
};

/** Every word the protocol writes (the word-level vocabulary needs them). */
export const PROTOCOL_WORDS: string[] = [
  ...new Set(
    [
      ...Object.values(SYNTHETIC_TEXT),
      "( 1 ) ( 2 ) ( 3 ) ( 4 ) ( 5 ) ( 6 ) ( 7 ) ( 8 ) ( 9 ) ( 10 )",
      "i should search i know the answer found it",
    ]
      .join(" ")
      .split(/\s+/)
      .filter((w) => w !== "" && !w.startsWith("<") && !w.startsWith("{")),
  ),
];

/** The engine preset of the tiny model for this task (its vocab_size is the generated vocabulary's). */
export const TINY_SYNTHETIC_PRESET = "tiny-synthetic";

/** The generic defaults (options.ts BASE_OPTIONS) are sized for the tiny preset on 2 CPU cores; this recipe adds its warm start. */
const DEFAULTS: RecipeDefaults = { bootstrapSteps: 2000, bootstrapMixedShare: 0.075, threads: 1 };

/** The always-search phase has converged once the mean token NLL of its last 25 steps is under this. */
const CONVERGED_NLL = 0.05;

/**
 * The easy task's warm start: a phase that always searches (copying names and
 * answers is learned; it ends once converged), then a mixed phase where some
 * question kinds are mostly guessed, so RL starts from a policy that knows
 * every behaviour and only has to re-weight it.
 */
function easyPlan(task: SearchR1Task, o: RunOptions): WarmStartPlan {
  const synthetic = task.extra as SyntheticTask;
  const mixedSteps = Math.round(o.bootstrapSteps * o.bootstrapMixedShare);
  const index = Bm25Index.build(task.corpus);
  const retrieve = (q: string, k: number) => index.search(q, k);
  const demos = (mix: typeof DEFAULT_MIX) => (step: number, n: number) => demonstrations(synthetic, task.tokenizer, task.text, retrieve, n, o.seed * 1_000_003 + step, mix);
  const material = { v: 7, converged: CONVERGED_NLL, task: task.describe, vocab: task.tokenizer.size, model: task.model, extras: task.trainer, mix: [SEARCH_ALWAYS, DEFAULT_MIX], mixedSteps, steps: o.bootstrapSteps, batch: o.bootstrapBatch, lr: o.bootstrapLr, seed: o.seed };
  return {
    recipe: "tiny-synthetic-easy",
    material,
    phases: [
      { steps: o.bootstrapSteps - mixedSteps, demos: demos(SEARCH_ALWAYS), convergeNll: CONVERGED_NLL },
      { steps: mixedSteps, demos: demos(DEFAULT_MIX) },
    ],
    batch: o.bootstrapBatch,
    lr: o.bootstrapLr,
    seed: o.seed,
  };
}

/** The synthetic task on the tiny preset. */
export const syntheticRecipe: TaskRecipe<SearchR1Task> = {
  name: "tiny-synthetic-easy",
  defaults: DEFAULTS,
  matches: (model, data) => model === "tiny" && data === "synthetic-easy",
  async prepare(o: RunOptions): Promise<SearchR1Task> {
    const task = syntheticTask({ seed: o.seed, heldOut: Math.max(o.evalSize, 1), people: 1000 + Math.max(o.evalSize, 1) });
    const tokenizer = tokenizerFromJson(wordTokenizerJson([...task.words, ...PROTOCOL_WORDS]));
    return withSearchEnvironment({
      recipe: "tiny-synthetic-easy",
      train: task.train,
      heldOut: task.heldOut.slice(0, o.evalSize),
      corpus: task.corpus,
      tokenizer,
      text: SYNTHETIC_TEXT,
      model: { config: TINY_SYNTHETIC_PRESET, overrides: { vocab_size: tokenizer.size } },
      // Frozen random (tied) embeddings make every entity name look alike to the network, so
      // copying learned on training names also works for held-out names it never saw.
      trainer: { freezeEmbeddings: true, embeddingRms: 0.5 },
      describe: `synthetic task (seed ${o.seed}): ${task.train.length} training questions, ${Math.min(o.evalSize, task.heldOut.length)} held-out, ${task.corpus.length} passages`,
      notes: [],
      extra: task,
    }, o.topK);
  },
  async warmStart(ctx: WarmStartContext<SearchR1Task>): Promise<string | undefined> {
    if (ctx.opts.bootstrapSteps <= 0) return undefined;
    return cachedWarmStart(ctx.app, ctx.trainer, ctx.task, easyPlan(ctx.task, ctx.opts), ctx.opts);
  },
};
