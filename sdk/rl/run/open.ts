/**
 * Opening a run, before any step: the options layered and checked, the
 * task prepared (every bad flag, model folder or data file fails here,
 * before any service starts), the cluster asked whether the resources fit,
 * the app connected, the environment's objects and the rollout setup put
 * under the run's keys (or kept, when the run on the app is this one), and
 * the services declared.
 */
import type { ObjectRef } from "../../cache/object-cache.js";
import { capacity, connect, type ClusterCapacity } from "../../connect.js";
import { checkSlurmJobs } from "../../engines/slurm/index.js";
import type { App } from "../../runtime/app.js";
import type { PoolHandle } from "../../runtime/handles.js";
import type { PendingReport } from "../../runtime/pending-watch.js";
import { formatBytes } from "../../format.js";
import { parseResreq } from "../../runtime/resreq.js";
import { OptionError, RunError } from "../errors.js";
import { ROLLOUT_CLASS } from "../services/modules.js";
import type { RolloutService, RolloutSetup } from "../services/rollout-service.js";
import { readResume } from "../state/checkpoint.js";
import { envObjectKey, putOrUpdate, rolloutSetupKey, weightsKey } from "../state/run-objects.js";
import { readRunState, runFingerprint, type RunState } from "../state/run-state.js";
import { backendFor, layerOptions, threadsFor, validateOptions, type RunOptions } from "./options.js";
import type { EnvironmentPackage, PreparedTask, TaskRecipe } from "./recipe.js";
import { declareTrainers, Trainers } from "./trainers.js";
import { endpointSetup } from "./agent-rollouts.js";

/** Calls one rollout executor takes at once when it serves the agent endpoint. */
const ENDPOINT_CONCURRENCY = 8;

/** A run opened: what AgentRun is made of. */
export interface OpenedRun {
  app: App;
  opts: RunOptions;
  task: PreparedTask;
  recipe: TaskRecipe;
  rollout: PoolHandle<RolloutService>;
  trainers: Trainers;
  rolloutSetup: ObjectRef;
  /** The run stored on the app under this name when it is this run (same options): the driver reattaches to it. */
  same?: RunState;
  /** The checkpoint being resumed. */
  resume?: ReturnType<typeof readResume>;
}

/** Layers the options of a run of `pkg` (generic defaults, the recipe's, the caller's) and checks them. */
export function runOptions(partial: Partial<RunOptions>, pkg: EnvironmentPackage): { opts: RunOptions; recipe: TaskRecipe } {
  if (partial.env !== undefined && partial.env !== pkg.name) throw new OptionError(`--env ${partial.env}: this run is created with the '${pkg.name}' environment`, { flag: "--env" });
  const recipe = pkg.recipeFor(partial.model ?? "tiny", partial.data ?? "synthetic");
  const opts = layerOptions(recipe.defaults, { ...partial, env: pkg.name });
  validateOptions(opts);
  return { opts, recipe };
}

/** Opens a run of `pkg` (see the file's header). */
export async function openRun(partial: Partial<RunOptions>, pkg: EnvironmentPackage): Promise<OpenedRun> {
  const { opts, recipe } = runOptions(partial, pkg);
  const resume = opts.resume ? readResume(opts.resume) : undefined;
  const log = opts.log;
  const task = await recipe.prepare(opts);
  const items = task.environment.items ?? "items";
  if (task.train.length === 0) throw new OptionError(`${opts.data}: no training ${items} are left once ${task.heldOut.length} are held out for evaluation; lower --eval-size or use a larger file`, { flag: "--eval-size" });
  if (task.heldOut.length === 0) throw new OptionError(`${opts.data}: no held-out ${items} to evaluate on; raise --eval-size`, { flag: "--eval-size" });
  for (const note of task.notes) log(`note: ${note}`);
  log(`task: ${task.describe}`);
  opts.onEvent?.({ type: "task", describe: task.describe, train: task.train.length, heldOut: task.heldOut.length });
  await preflight(opts);
  const app = await connect({
    ...opts.connectOptions,
    name: opts.name,
    head: opts.head,
    engine: opts.engine,
    partition: opts.partition,
    account: opts.account,
    extraArgs: opts.sbatchArgs.length > 0 ? opts.sbatchArgs : undefined,
    slurm: opts.bind !== undefined ? { ...opts.connectOptions?.slurm, bind: opts.bind } : opts.connectOptions?.slurm,
  });
  try {
    return await openServices(app, opts, task, recipe, resume);
  } catch (err) {
    // Nothing holds the app now: its connection goes (its executors stay for the keep-alive), so the caller's process can exit.
    await app.disconnect().catch(() => undefined);
    throw err;
  }
}

async function openServices(app: App, opts: RunOptions, task: PreparedTask, recipe: TaskRecipe, resume: OpenedRun["resume"]): Promise<OpenedRun> {
  const log = opts.log;
  if (opts.bind !== undefined && hostOf(app.endpoint) !== hostOf(opts.bind)) {
    log(`note: --bind ${opts.bind} is not used: the Slurm head of this HEARTH_HOME already runs at ${app.endpoint} (stop it with stopSlurmHead, or use another HEARTH_HOME, to bind elsewhere)`);
  }
  const fp = runFingerprint(opts);
  const prior = opts.resume ? undefined : await readRunState(app, opts.name);
  const same = prior && prior.fingerprint === fp.digest ? prior : undefined;
  if (prior && !same) log(`starting a new run '${opts.name}': its options differ from the run stored on this app (${differences(prior.values, fp.values)})`);
  // The rollouts of the same run hold its setup: nothing to rebuild.
  const rolloutSetup = same ? same.rolloutSetup : await putRolloutSetup(app, opts, task);
  // Asking for more than the cluster has is said at once and again while it waits (the head explains it).
  const onPending = (p: PendingReport): void => log(`waiting: ${p.text}`);
  // An executor serving agent sessions takes calls beside an open lease (closing it is one): calls queue on its turn inside, not at the head.
  const concurrency = task.tokenizer.template ? ENDPOINT_CONCURRENCY : undefined;
  const rollout = await app.service<RolloutService>(opts.serviceModules?.rollout ?? ROLLOUT_CLASS, { name: "rollout", resreq: opts.rolloutResreq, warmup: opts.rollouts, max: opts.rollouts, replace: opts.replace, onPending, concurrency });
  const gang = await declareTrainers(app, opts, opts.replace, onPending);
  log(`services ready: ${opts.rollouts} rollout executor(s) (${opts.rolloutResreq}), a gang of ${opts.trainers} trainer(s) (${opts.trainerResreq}, ${backendFor(opts)})`);
  const trainers = new Trainers({ app, opts, task, recipe, weightsKey: weightsKey(opts.name) }, gang);
  return { app, opts, task, recipe, rollout, trainers, rolloutSetup, same, resume };
}

/**
 * Puts the environment's large values and the rollout setup under the run's
 * keys: a new run of the name replaces the old one's (no copy per run is
 * left behind), and executors holding the old notice its version moved on.
 */
export async function putRolloutSetup(app: App, opts: RunOptions, task: PreparedTask, envRevision = 0): Promise<ObjectRef> {
  const env = task.environment;
  const envData: Record<string, unknown> = { ...env.data };
  for (const [name, value] of Object.entries(env.objects ?? {})) envData[name] = await putOrUpdate(app, envObjectKey(opts.name, name), value);
  const setup: RolloutSetup = {
    model: task.model,
    tokenizer: task.tokenizer.files,
    environment: env.spec,
    envData,
    toolTimeoutMs: opts.toolTimeoutMs,
    ...(envRevision > 0 ? { envRevision } : {}),
    threads: threadsFor(opts, opts.rolloutResreq),
    dtype: opts.rolloutDtype,
    // A policy with a chat template is served to agents too (the endpoint starts on first use).
    ...(task.tokenizer.template ? { endpoint: endpointSetup(app, opts) } : {}),
  };
  return putOrUpdate(app, rolloutSetupKey(opts.name), setup);
}

/** Asks the cluster, before anything is submitted or opened, whether the run's resources can be had. */
async function preflight(opts: RunOptions): Promise<void> {
  if (opts.engine === "slurm") {
    // Slurm is asked, with the very options the jobs will carry, before anything is submitted.
    await checkSlurmJobs(
      [
        { what: "a rollout executor's job", tasks: 1, resreq: opts.rolloutResreq },
        { what: `the trainer gang's job`, tasks: opts.trainers, resreq: opts.trainerResreq },
      ],
      { partition: opts.partition, account: opts.account, extraArgs: opts.sbatchArgs, env: opts.connectOptions?.slurm?.env, defaultMem: opts.connectOptions?.slurm?.defaultMem },
    );
  } else {
    // A fixed cluster: the resources must fit an agent, asked of the head before the app is opened.
    checkCapacity(await capacity({ ...opts.connectOptions, name: opts.name, head: opts.head }), opts);
  }
}

/**
 * On a fixed cluster (no Slurm jobs to add), a resreq that no agent can ever
 * satisfy would leave the services pending: say so before the app is even
 * opened (the head's capacity is asked without creating it).
 */
function checkCapacity(cluster: ClusterCapacity, o: RunOptions): void {
  // A head whose agents have not registered yet may still get them.
  if (cluster.agents.length === 0) return;
  for (const [flag, resreq] of [["--rollout-resreq", o.rolloutResreq], ["--trainer-resreq", o.trainerResreq]] as const) {
    const want = parseResreq(resreq);
    const fits = cluster.agents.some((a) => a.total.cpu >= want.cpu && a.total.mem >= want.mem && a.total.gpus >= want.gpu);
    if (!fits) {
      const have = cluster.agents.map((a) => `${a.id}: cpu=${a.total.cpu},mem=${formatBytes(a.total.mem)},gpu=${a.total.gpus}`).join("; ");
      throw new OptionError(`${flag} "${resreq}" fits no agent of this cluster (${have}): ask for less (on CPU, e.g. --rollout-resreq cpu=1 --trainer-resreq cpu=1), or add an agent that has it`, { flag });
    }
  }
}

/** The check a driver makes before reattaching: its trainers must hold the policy version the run recorded. */
export function checkReattach(opts: RunOptions, prior: RunState, held: { policyVersion: number; updates: number }): void {
  if ((prior.policyVersion !== undefined && held.policyVersion !== prior.policyVersion) || (prior.updates !== undefined && held.updates !== prior.updates)) {
    throw new RunError(
      `run '${opts.name}' cannot go on exactly: its trainers hold policy version ${held.policyVersion} after ${held.updates} updates, but the run recorded version ${prior.policyVersion} after ${prior.updates ?? "?"} at step ${prior.step}. ` +
        `A step was trained after the last one recorded (its driver was lost between the update and recording it), and that step's metrics and trajectories are lost. ` +
        `Start the run again (replace: true / other options), or resume it from a checkpoint (--resume DIR)`,
      { run: opts.name, step: prior.step },
    );
  }
}

function differences(a: Record<string, unknown> | undefined, b: Record<string, unknown>): string {
  const keys = Object.keys(b).filter((k) => JSON.stringify(a?.[k]) !== JSON.stringify(b[k]));
  return keys.map((k) => `${k}: ${JSON.stringify(a?.[k])} → ${JSON.stringify(b[k])}`).join(", ") || "unknown";
}

/** The host part of tcp://HOST:PORT. */
function hostOf(endpoint: string): string {
  return /^tcp:\/\/(.+):\d+$/.exec(endpoint)?.[1] ?? endpoint;
}
