/**
 * `hearth model init …`: write a random-weight Hugging Face folder (see
 * sdk/tensor/model-folder.ts) for tests, CPU runs and GPU memory planning.
 */
import { parseArgs } from "node:util";
import { HearthError } from "../sdk/errors/index.js";
import { initModelFolder } from "../sdk/tensor/model-folder.js";

/** Usage lines of `hearth model`, shown in `hearth --help`. */
export const MODEL_USAGE = `model init --preset NAME --tokenizer FILE --out DIR [--seed N] [--tokenizer-config FILE] [--shard-size BYTES]
          write a Hugging Face folder with seeded random weights; presets: qwen2-tiny (CPU tests, real
          151936 vocabulary), qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b (published shapes); shards above
          --shard-size (default 5000000000, as transformers does)`;

function wholeNumber(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text.trim())) throw new HearthError(`${flag} must be a non-negative whole number; got '${text}'`);
  return Number(text);
}

/** Runs `hearth model <subcommand>`; returns the exit code. */
export async function runModelCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub !== "init") {
    console.error(`usage: hearth ${MODEL_USAGE}`);
    return 2;
  }
  const { values } = parseArgs({
    args: rest,
    options: {
      preset: { type: "string" }, tokenizer: { type: "string" }, "tokenizer-config": { type: "string" },
      out: { type: "string" }, seed: { type: "string" }, "shard-size": { type: "string" },
    },
  });
  for (const flag of ["preset", "tokenizer", "out"] as const) {
    if (!values[flag]) throw new HearthError(`hearth model init needs --${flag}\nusage: hearth ${MODEL_USAGE}`);
  }
  const result = await initModelFolder({
    preset: values.preset!,
    tokenizer: values.tokenizer!,
    tokenizerConfig: values["tokenizer-config"],
    out: values.out!,
    seed: wholeNumber("--seed", values.seed),
    shardSize: wholeNumber("--shard-size", values["shard-size"]),
  });
  for (const w of result.warnings) console.error(`warning: ${w}`);
  console.log(`wrote ${result.dir}: ${values.preset} (${(result.params / 1e6).toFixed(1)} M params), ` +
    `${result.weightFiles.length} weight file(s), eos ids [${result.eosTokenIds.join(", ")}], in ${result.seconds.toFixed(1)} s`);
  return 0;
}
