/**
 * What the two agent recipes share: questions written as prose, the
 * tokenizer made from everything their conversations can say, the policy's
 * shape (the calculator's: 4 layers, 64 wide, frozen random embeddings), and
 * the warm start's plan (demonstrations drawn per step from training
 * questions' solution paths, with varied first prompts).
 */
import { createHash } from "node:crypto";
import { demosDigest, jsonDigest, supervisedPlan, type WarmStartPlan } from "../../../rl/run/warm-start.js";
import type { RunOptions } from "../../../rl/run/options.js";
import type { PreparedTask } from "../../../rl/run/recipe.js";
import { tokenizerFromFiles, type TextTokenizer } from "../../../rl/text/tokenizer.js";
import { rng } from "../../../rl/random.js";
import type { Demo, ModelShape, TaskItem } from "../../../rl/types.js";
import { agentTokenizerFiles, corpusWords } from "../agent-tokenizer.js";
import { drawPrompt, episodeDemo, episodePieces, exploringScript, promptText, type PathStep, type PromptVariants } from "../conversation.js";
import { CALLS_EXHAUSTED } from "../environment.js";

/** A training question of an agent task: the item, and the path of calls that answers it. */
export interface AgentQuestion {
  item: TaskItem;
  path: PathStep[];
}

/**
 * Questions a warm start's demonstrations are drawn from instead of the
 * training ones, and what they are for the fingerprint (`material`).
 */
export interface DemoPool {
  material: Record<string, unknown>;
  questions: readonly AgentQuestion[];
}

/** An agent task as its recipe prepares it (`extra` for its warm start). */
export interface AgentPreparedTask extends PreparedTask<TaskItem> {
  extra: { train: AgentQuestion[]; variants: PromptVariants; explore: readonly number[]; world: unknown; demoPool?: DemoPool };
}

/** A question of the generated tasks ("a crate holds 37 boxes … ?", spaced words) as prose ("A crate holds 37 boxes …?"). */
export function prose(question: string): string {
  const s = question.replace(/ ([.,?!])/g, "$1");
  return s.replace(/(^|[.?!] )(\p{Ll})/gu, (_, before: string, c: string) => before + c.toUpperCase());
}

/** The policy's shape: the tiny preset, 4 layers, the vocabulary's size. */
export function agentModel(tokenizer: TextTokenizer): ModelShape {
  return { config: "tiny-synthetic", overrides: { vocab_size: tokenizer.size, num_hidden_layers: 4 } };
}

/** Frozen random (tied) embeddings: every number and name looks alike to the network, so copying learned on some works on all. */
export const AGENT_TRAINER = { freezeEmbeddings: true, embeddingRms: 0.5 };

/**
 * The tokenizer of a task: every word its conversations can hold (each
 * question and its whole solution path, every first prompt the warm start
 * draws, the tool's other answers), numbers to 9,999, bytes for the rest.
 */
export function agentTokenizer(questions: readonly AgentQuestion[], variants: PromptVariants, extraTexts: readonly string[]): TextTokenizer {
  const texts: string[] = [...extraTexts, CALLS_EXHAUSTED];
  for (const system of [undefined, ...variants.systems]) for (const tools of variants.tools) texts.push(promptText("", tools, system));
  for (const q of questions) texts.push(...episodePieces({ question: q.item.question, tools: [], turns: q.path.map((p) => ({ calls: [p.call], results: [p.result] })), answer: q.path.at(-1)!.answer }).map((p) => p.text));
  return tokenizerFromFiles(agentTokenizerFiles(corpusWords(texts)));
}

/** `n` demonstrations from `questions` (seeded), each with a drawn first prompt and a partly followed path. */
export function agentDemonstrations(questions: readonly AgentQuestion[], variants: PromptVariants, explore: readonly number[], tokenizer: TextTokenizer, n: number, seed: number): Demo[] {
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const q = questions[Math.floor(r() * questions.length)]!;
    return episodeDemo(tokenizer, exploringScript(r, q.item.question, q.path, explore, drawPrompt(r, variants)));
  });
}

/** First prompts without tools or a system message (~40 tokens instead of ~110): the warm start's first phase. */
export const SHORT_PROMPTS: PromptVariants = { systems: [], tools: [[]] };

/**
 * Share of the warm start's steps on short prompts. Copying a number from
 * the question or a tool result is a circuit the policy must form; behind
 * the ~70 tokens of a tools block it had not formed after 400 steps (token
 * NLL of copied numbers stuck at 8.9, log of the numbers' count), on short
 * prompts it forms by step 400, and it carries over to the long ones
 * (measured: docs/agents.md).
 */
export const SHORT_PROMPT_SHARE = 1 / 3;

/**
 * The warm start of an agent task: a phase on short prompts, then one on the
 * first prompts agents send (tools rendered several ways, a system message
 * or none); its material covers the tokenizer, the questions, the prompts and
 * the first demonstrations of each phase.
 */
export function agentPlan(recipe: string, task: AgentPreparedTask, o: Pick<RunOptions, "bootstrapSteps" | "bootstrapBatch" | "bootstrapLr">): WarmStartPlan {
  const seed = 1;
  const { train, variants, explore, world, demoPool } = task.extra;
  const pool = demoPool?.questions ?? train;
  const short = Math.round(o.bootstrapSteps * SHORT_PROMPT_SHARE);
  const demos = (v: PromptVariants) => (step: number, n: number) => agentDemonstrations(pool, v, explore, task.tokenizer, n, seed * 1_000_003 + step);
  const phases: WarmStartPlan["phases"] = [
    { steps: short, demos: demos(SHORT_PROMPTS) },
    { steps: o.bootstrapSteps - short, demos: demos(variants) },
  ];
  const tokenizer = createHash("sha256").update(task.tokenizer.files["tokenizer.json"]!).digest("hex").slice(0, 16);
  return supervisedPlan(
    recipe,
    {
      v: 1,
      world,
      tokenizer,
      task: jsonDigest(train.map((q) => [q.item.question, q.path])),
      ...(demoPool === undefined ? {} : { demoPool: demoPool.material }),
      prompts: jsonDigest(variants),
      shortShare: SHORT_PROMPT_SHARE,
      // Both phases' first batches (the first 16 of the plan are all the short phase's).
      demos: [demosDigest(phases, o.bootstrapBatch), demosDigest(phases.slice(1), o.bootstrapBatch)],
      model: task.model,
      trainer: task.trainer ?? {},
      explore,
    },
    phases,
    o,
    seed,
  );
}

