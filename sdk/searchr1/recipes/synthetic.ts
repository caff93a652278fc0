/**
 * The embedded default's recipe: the synthetic search task (synthetic.ts), a
 * word-level vocabulary generated from its words, a 2-layer 64-wide model
 * with frozen, rescaled random embeddings, the spaced protocol text that
 * vocabulary can spell, and a cached supervised warm start.
 */
import { runBootstrap } from "../bootstrap-run.js";
import type { SearchR1Options } from "../options.js";
import type { ProtocolText } from "../protocol.js";
import type { PreparedTask, TaskRecipe, WarmStartContext } from "../recipe.js";
import { syntheticTask, type SyntheticTask } from "../synthetic.js";
import { tokenizerFromJson, wordTokenizerJson } from "../tokenizer.js";
import { HearthError } from "../../errors/index.js";

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
const DEFAULTS: TaskRecipe["defaults"] = { bootstrapSteps: 2000, bootstrapMixedShare: 0.075, threads: 1 };

/** The synthetic task on the tiny preset. */
export const syntheticRecipe: TaskRecipe = {
  name: "tiny-synthetic",
  defaults: DEFAULTS,
  matches: (model) => model === "tiny",
  async prepare(o: SearchR1Options): Promise<PreparedTask> {
    if (o.data !== "synthetic") {
      throw new HearthError(`--data ${o.data}: the tiny preset's word-level vocabulary only covers the synthetic task; pass a Hugging Face model folder (--model DIR, e.g. one made by 'hearth model init')`);
    }
    const task = syntheticTask({ seed: o.seed, heldOut: Math.max(o.evalSize, 1), people: 1000 + Math.max(o.evalSize, 1) });
    const tokenizer = tokenizerFromJson(wordTokenizerJson([...task.words, ...PROTOCOL_WORDS]));
    return {
      recipe: "tiny-synthetic",
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
    };
  },
  async warmStart(ctx: WarmStartContext): Promise<string | undefined> {
    if (ctx.opts.bootstrapSteps <= 0) return undefined;
    return runBootstrap(ctx.app, ctx.trainer, ctx.task, ctx.task.extra as SyntheticTask, ctx.opts);
  },
};
