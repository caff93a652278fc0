/**
 * The environment interface: what a tool-using agent's task supplies to the
 * RL layer. An environment is a module (`{ module, export }`), so it travels
 * to the rollout executors and stays warm there: `init` builds its state
 * once per executor (an index, a database connection), `reset` gives a task
 * item's prompt, generation pauses at its stop strings, and `step` runs the
 * tool call a turn ended with and returns the observation to insert (masked
 * from the loss) or says the episode is done. The layer owns the rest: the
 * limits (tool calls, turn and response tokens), the mask bits, the reward
 * (hot-swappable per step, on the driver), GRPO, weight sync and runs.
 *
 * Errors in environment code fail the sample they happened on (its episode
 * ends with finish "error" and an EnvironmentError naming the environment,
 * the sample and the call), never the run silently; a tool call that does
 * not answer within `toolTimeoutMs` fails the same way.
 *
 * @example
 * ```ts
 * // echo-env.ts: a tool that upper-cases what it is given.
 * import type { Environment, EnvTurn } from "hearth/rl";
 * export class Shout implements Environment<{ calls: number }> {
 *   readonly name = "shout";
 *   readonly stops = ["</shout>", "</answer>"];
 *   reset(item) { return { system: "Use <shout>text</shout>, then <answer>…</answer>.", user: item.question, state: { calls: 0 } }; }
 *   step(state, turn: EnvTurn) {
 *     if (turn.stop === "</answer>") return { done: true };
 *     const text = /<shout>(.*)<\/shout>$/s.exec(turn.text)?.[1] ?? "";
 *     if (turn.callsLeft === 0) return { observation: " <result> no calls left </result> " };
 *     return { observation: ` <result> ${text.toUpperCase()} </result> `, call: text };
 *   }
 * }
 * ```
 */
import type { ObjectCache } from "../cache/object-cache.js";
import { EnvironmentError } from "./errors.js";
import type { TaskItem } from "./types.js";

export { EnvironmentError };

/** Where an environment's class is: a module file (absolute, or a file: URL) and its export. */
export interface EnvironmentSpec {
  module: string;
  export: string;
}

/** What `init` gets on a rollout executor. */
export interface EnvironmentContext {
  /** The executor's id (for logs). */
  executorId: string;
  /** The object cache (the environment's data travels by reference: `objects.get(ref)`). */
  objects: ObjectCache;
  /** The environment's own settings and data for this run (its recipe's `envData`), as shipped. */
  data: unknown;
}

/** A generation turn that stopped at one of the environment's stop strings. */
export interface EnvTurn {
  /** The text generated in this turn (since the last observation). */
  text: string;
  /** The stop string it ended with. */
  stop: string;
  /** Tool calls the layer still allows this sample (0: the limit is reached; answer without running the tool). */
  callsLeft: number;
}

/**
 * What a step does: end the episode, or insert an observation (and, when a
 * tool ran, say what it was called with). `ids`, when given, are the
 * observation's token ids exactly (a replay inserting what was recorded);
 * otherwise the observation's text is encoded.
 */
export type EnvStep = { done: true } | { observation: string; call?: string; ids?: readonly number[] };

/** An environment on a rollout executor. `State` is one episode's. */
export interface Environment<State = unknown> {
  /** Its name, in errors and logs. */
  readonly name: string;
  /** Generation pauses at these (a tool call's closing tag, the answer's). */
  readonly stops: readonly string[];
  /** Builds the executor's warm state, once. */
  init?(ctx: EnvironmentContext): void | Promise<void>;
  /** A task item's prompt (a system and a user turn, rendered with the tokenizer's chat template) and its episode's state. */
  reset(item: TaskItem): { system: string; user: string; state: State };
  /** The turn stopped at one of `stops`: run the tool it asked for, or end. */
  step(state: State, turn: EnvTurn): EnvStep | Promise<EnvStep>;
  /** Frees what `init` built (the executor is stopping). */
  close?(): void | Promise<void>;
}

/** Loads and checks an environment class from its module (a clear error naming the module and the export when it is not one). */
export async function loadEnvironment(spec: EnvironmentSpec, importer: (module: string) => Promise<Record<string, unknown>>): Promise<Environment> {
  const mod = await importer(spec.module);
  const Ctor = mod[spec.export];
  if (typeof Ctor !== "function") throw new EnvironmentError(`${spec.module} has no export '${spec.export}' that is a class (it exports ${Object.keys(mod).join(", ") || "nothing"})`, { environment: spec.export });
  const env = new (Ctor as new () => Environment)();
  for (const [what, ok] of [["a name", typeof env.name === "string"], ["stop strings", Array.isArray(env.stops) && env.stops.length > 0 && env.stops.every((s) => typeof s === "string" && s.length > 0)], ["reset()", typeof env.reset === "function"], ["step()", typeof env.step === "function"]] as const) {
    if (!ok) throw new EnvironmentError(`${spec.module}#${spec.export} is not an environment: it lacks ${what}`, { environment: spec.export });
  }
  return env;
}
