/**
 * A prepared Search-R1 task: its questions and passages and the protocol
 * text its tokenizer can spell, with the environment a run ships to its
 * rollout executors (the BM25 index is built there, once per executor, from
 * the corpus object) and the driver side's exact-match score.
 */
import { fileURLToPath } from "node:url";
import type { PreparedTask, TaskEnvironment } from "../../rl/run/recipe.js";
import type { EnvWords } from "../../rl/types.js";
import type { ProtocolText } from "./protocol.js";
import { emReward, extractAnswer } from "./reward.js";
import type { Passage, Question } from "./tasks/synthetic.js";

/** How Search-R1 names its tool calls (the metrics keep the names they had: `searches_per_sample`, `eval_searches`). */
export const SEARCH_WORDS: EnvWords = { call: "search", calls: "searches", observation: "retrieved passage" };

/** The environment's class, as rollout executors load it. */
export const SEARCH_R1_ENVIRONMENT = { module: fileURLToPath(new URL("./environment.js", import.meta.url)), export: "SearchR1Environment" };

/** A Search-R1 task as its recipes prepare it. */
export interface SearchR1Task extends PreparedTask<Question> {
  /** The passages searched (shipped once to each rollout executor). */
  corpus: Passage[];
  /** The protocol's words. */
  text: ProtocolText;
}

/** The environment of a Search-R1 task: `topK` passages per search. */
export function searchR1Environment(text: ProtocolText, corpus: readonly Passage[], topK: number): TaskEnvironment {
  return {
    title: "Search-R1",
    spec: SEARCH_R1_ENVIRONMENT,
    data: { text, topK },
    objects: { corpus },
    words: SEARCH_WORDS,
    reward: emReward,
    exactMatch: emReward,
    answerOf: extractAnswer,
    items: "questions",
  };
}

/** Completes a recipe's task with its environment. */
export function withSearchEnvironment(task: Omit<SearchR1Task, "environment">, topK: number): SearchR1Task {
  return { ...task, environment: searchR1Environment(task.text, task.corpus, topK) };
}
