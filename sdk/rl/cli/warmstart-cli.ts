/**
 * `hearth warmstart [--env NAME]`: (re)makes an environment's shipped
 * starting policy through the same code as a run's warm start
 * (warm-start.ts), on the embedded default or a given head, and writes the
 * HF folder with its manifest: by default over the shipped one (under
 * policies/), which `npm run demo`, the notebooks and the tests start from.
 * Which policies there are, each environment says (a ShippedPolicy).
 */
import { parseArgs } from "node:util";
import path from "node:path";
import { connect } from "../../connect.js";
import { HearthError } from "../../errors/index.js";
import { makeWarmStart, planHash, type ShippedPolicy } from "../run/warm-start.js";
import { layerOptions } from "../run/options.js";

export type { ShippedPolicy };
import { TRAINER_CLASS } from "../services/modules.js";
import type { TrainerService } from "../services/trainer-service.js";

/** Usage of `hearth warmstart`. */
export const WARMSTART_USAGE = `usage: hearth warmstart [--env search-r1|calculator|agent-calculator|agent-chain] [--out DIR] [--steps N] [--cpus N] [--head tcp://HOST:PORT]
  (re)makes an environment's starting policy (default: Search-R1's tiny chain task, over the shipped one in policies/tiny-chain;
  --steps other than the recipe's makes a policy runs accept only with the same --bootstrap-steps)`;

/** Runs `hearth warmstart`; `policies` are the shipped policies by environment name; returns the exit code. */
export async function runWarmstartCommand(args: string[], policies: Readonly<Record<string, ShippedPolicy>>, fallback: string): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({ args, options: { env: { type: "string" }, out: { type: "string" }, steps: { type: "string" }, cpus: { type: "string" }, head: { type: "string" }, help: { type: "boolean" } }, strict: true }).values;
  } catch (err) {
    throw new HearthError(`${(err as Error).message}\n${WARMSTART_USAGE}`);
  }
  if (values.help) {
    console.log(WARMSTART_USAGE);
    return 0;
  }
  const env = (values.env as string | undefined) ?? fallback;
  const shipped = policies[env];
  if (!shipped) throw new HearthError(`--env ${env}: no shipped policy for it (there are: ${Object.keys(policies).join(", ")})\n${WARMSTART_USAGE}`);
  const whole = (flag: string, v: string | boolean | undefined, min: number): number | undefined => {
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new HearthError(`--${flag} must be a whole number ≥ ${min}; got '${String(v)}'\n${WARMSTART_USAGE}`);
    return n;
  };
  const steps = whole("steps", values.steps, 1);
  // One rank steps on the whole batch (see TrainerService.sft); its torch threads follow its cpu request.
  const cpus = whole("cpus", values.cpus, 1) ?? 1;
  const out = path.resolve((values.out as string | undefined) ?? shipped.dir());
  const o = layerOptions(shipped.defaults, { bootstrapSteps: steps, trainers: 1, trainerResreq: `cpu=${cpus}`, threads: cpus });
  const task = shipped.prepare(o);
  const plan = shipped.plan(task, o);
  const command = ["hearth warmstart", ...args].join(" ");
  console.log(`warm start of ${plan.recipe} (recipe ${planHash(plan)}): ${o.bootstrapSteps} supervised steps of ${o.bootstrapBatch} demonstrations → ${out}`);
  const app = await connect({ name: `warmstart-${plan.recipe}`, head: values.head as string | undefined });
  try {
    const trainer = await app.service<TrainerService>(TRAINER_CLASS, { name: "trainer", resreq: o.trainerResreq, warmup: 1, autoscale: false, replace: true });
    let last = 0;
    const m = await makeWarmStart(app, trainer, task, plan, { ...o, log: (l) => console.log(l) }, out, command, (e) => {
      if (e.step === e.total || performance.now() - last > 10_000) {
        last = performance.now();
        console.log(`  step ${e.step}/${e.total}  token NLL ${e.nll.toFixed(3)}`);
      }
    });
    console.log(`done: ${m.steps} steps in ${m.seconds} s, mean token NLL ${m.nll.toFixed(3)}; model.safetensors sha256 ${m.files["model.safetensors"]}`);
    return 0;
  } finally {
    await app.close().catch(() => undefined);
  }
}
