/**
 * `hearth replay RUN --step N --sample K [--version V] [--top-k 5] [--json]`:
 * replays one sample of a run that lives on the cluster (`--detach`),
 * exactly, on its rollout executors, and prints it: each generated token
 * coloured by its probability (ANSI colours on a terminal; `--no-color`),
 * the least likely tokens with their alternatives, and whether the replay
 * equals the recording. `--json` prints the episode as data: every token
 * with its kind, probability, entropy and alternatives, what a notebook's
 * view draws.
 */
import { parseArgs } from "node:util";
import { HearthError } from "../../errors/index.js";
import { AttachedRun } from "../notebook/attached.js";

/** Usage of `hearth replay`. */
export const REPLAY_USAGE = `replay  RUN --step N --sample K [--version V] [--top-k 5] [--json] [--prompt] [--no-color] [--head ENDPOINT]
                                                replay sample K of step N of a run on the cluster exactly (every token and
                                                logprob checked against the recording), coloured by probability, with each
                                                token's top-k alternatives; --version V: under another policy version`;

function whole(flag: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || n < min) throw new HearthError(`--${flag} must be a whole number ≥ ${min}; got '${v}'\nusage: hearth ${REPLAY_USAGE}`);
  return n;
}

/** Runs `hearth replay`; returns the exit code (1 when the replay differs from the recording). */
export async function runReplayCommand(args: string[], headOf: (given: string | undefined) => string): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { step: { type: "string" }, sample: { type: "string" }, version: { type: "string" }, "top-k": { type: "string" }, json: { type: "boolean" }, prompt: { type: "boolean" }, "no-color": { type: "boolean" }, head: { type: "string" } }, allowPositionals: true, strict: true });
  } catch (err) {
    throw new HearthError(`${(err as Error).message}\nusage: hearth ${REPLAY_USAGE}`);
  }
  const { values, positionals } = parsed;
  const name = positionals[0];
  if (!name || positionals.length > 1) throw new HearthError(`hearth replay needs the run's name\nusage: hearth ${REPLAY_USAGE}`);
  const sample = whole("sample", values.sample, 0);
  if (sample === undefined) throw new HearthError(`hearth replay needs --sample K (the trajectory table's i)\nusage: hearth ${REPLAY_USAGE}`);
  const topK = whole("top-k", values["top-k"], 0) ?? 5;
  if (topK > 20) throw new HearthError(`--top-k must be at most 20; got ${topK}`);
  const run = await AttachedRun.open(name, { head: headOf(values.head) });
  try {
    const ep = await run.replay({ step: whole("step", values.step, 1), sample, version: whole("version", values.version, 0), topK });
    if (values.json) console.log(JSON.stringify(ep.toJSON(), null, 2));
    else console.log(ep.terminal({ color: !values["no-color"] && process.stdout.isTTY === true, prompt: values.prompt === true }));
    return 0;
  } finally {
    await run.detach();
  }
}
