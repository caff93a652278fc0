/**
 * The services `bench overlap` runs: the real RolloutService and
 * TrainerService (weight sync between calls, trajectories, slices,
 * publications through the cache) on a simulated engine whose latency is
 * fixed per token and spent sleeping, so 14 rollout executors and 2 trainers
 * keep their proportions on a 2-core machine. The simulated engine samples
 * random words of the run's vocabulary and answers at once; it learns
 * nothing (the benchmark measures time, not learning).
 */
import { RolloutService } from "../sdk/rl/services/rollout-service.js";
import { TrainerService } from "../sdk/rl/services/trainer-service.js";
import type { TensorEngine } from "../sdk/tensor/index.js";
import type { ApplyResult, GenerateResult, GeneratedRow, InitModelOptions, InitModelResult, Publication, SamplingOptions, TrainBatch, TrainMetrics } from "../sdk/tensor/types.js";

/**
 * Latencies of the simulated engine. One decode step of a batch costs
 * `rolloutMsPerToken` (rows decode together, as on a GPU), so a call takes
 * its longest row's length times that; a trainer step costs
 * `trainMsPerToken` per generated token of its slice. With the benchmark's
 * batch (16 rows per call, 80–96 new tokens, 112 rows per trainer rank) a
 * rollout phase is ~1.43 s and an update ~0.95 s: the reference's 14.3 s
 * and 9.5 s scaled down 10×.
 */
export const SIM_LATENCY = { rolloutMsPerToken: 15, trainMsPerToken: 0.0964, minNewTokens: 80, maxNewTokens: 96 } as const;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A 32-bit mix of (seed, i): the simulated sampler's random stream. */
function mix(seed: number, i: number): number {
  let h = (Math.imul(seed | 0, 0x9e3779b1) ^ Math.imul(i + 1, 0x85ebca6b) ^ Math.floor(seed / 2 ** 32)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d) >>> 0;
  h = Math.imul(h ^ (h >>> 15), 0x846ca68b) >>> 0;
  return (h ^ (h >>> 16)) >>> 0;
}

/** The subset of TensorEngine the rollout and trainer services call, with sleeps for compute. */
export class SimEngine {
  private vocab = 1;
  private version = 0;
  private steps = 0;
  private session = 0;

  async initModel(_model: InitModelOptions): Promise<InitModelResult> {
    return { config: {}, params: 0, device: "sim", dtype: "sim", threads: 1, seconds: 0 };
  }

  async setVocab(pieces: readonly Uint8Array[]): Promise<{ size: number }> {
    this.vocab = pieces.length;
    return { size: pieces.length };
  }

  /** Every row writes `minNewTokens`…`maxNewTokens` random words (by its seed) and stops as if at `</answer>`. */
  async generate(prompts: readonly (Int32Array | readonly number[])[], sampling: SamplingOptions = {}): Promise<GenerateResult> {
    const cap = sampling.maxNewTokens ?? SIM_LATENCY.maxNewTokens;
    const span = SIM_LATENCY.maxNewTokens - SIM_LATENCY.minNewTokens + 1;
    const rows: GeneratedRow[] = prompts.map((_, i) => {
      const seed = sampling.seeds?.[i] ?? (sampling.seed ?? 0) * 1000 + i;
      const n = Math.min(cap, SIM_LATENCY.minNewTokens + (mix(seed, 0) % span));
      const tokens = Int32Array.from({ length: n }, (_, t) => mix(seed, t + 1) % this.vocab);
      return { tokens, logprobs: new Float32Array(n).fill(-1), finishReason: "stop", stop: "</answer>" };
    });
    await sleep(Math.max(0, ...rows.map((r) => r.tokens.length)) * SIM_LATENCY.rolloutMsPerToken);
    return { session: ++this.session, rows };
  }

  async resume(_session: number, appended: ReadonlyMap<number, unknown>): Promise<GeneratedRow[]> {
    return [...appended.keys()].map(() => ({ tokens: new Int32Array(0), logprobs: new Float32Array(0), finishReason: "length", stop: null }));
  }

  async release(): Promise<{ released: boolean }> {
    return { released: true };
  }

  /** A publication is one small blob naming its version. */
  async apply(blobs: readonly Uint8Array[]): Promise<ApplyResult> {
    for (const b of blobs) this.version = (JSON.parse(Buffer.from(b).toString("utf8")) as { version: number }).version;
    return { version: this.version, applied: [] };
  }

  async digest(): Promise<{ digest: string; tensors: number; version: number }> {
    return { digest: `sim-v${this.version}`, tensors: 0, version: this.version };
  }

  async trainInit(): Promise<{ config: Record<string, unknown>; backend: string | null }> {
    return { config: {}, backend: null };
  }

  /** Sleeps for the slice's generated tokens; reports in-sync agreement values. */
  async trainStep(b: TrainBatch): Promise<TrainMetrics> {
    const t0 = performance.now();
    let tokens = 0;
    for (const m of b.mask) tokens += m;
    await sleep(tokens * SIM_LATENCY.trainMsPerToken);
    this.steps++;
    return { tokens, rows: b.rows, loss: 0, pg: 0, kl: 0, entropy: 0, ratio: 1, ratio_max: 1, clipped: 0, gap: 0, gap_max: 0, grad_norm: 0, step: this.steps, seconds: (performance.now() - t0) / 1000 };
  }

  async publish(_maxShardBytes?: number, options?: { full?: boolean }): Promise<Publication> {
    this.version++;
    const blob = Buffer.from(JSON.stringify({ version: this.version }));
    const kind = this.version === 1 || options?.full ? "full" : "patch";
    return { kind, version: this.version, tensors: 1, dense: 1, sparse: 0, changed: 1, elements: 1, bytes: blob.length, seconds: {}, blobs: [blob] };
  }

  async stateDigest(): Promise<{ weights: string; moments: string; steps: number }> {
    return { weights: `sim-${this.steps}`, moments: `sim-${this.steps}`, steps: this.steps };
  }

  async close(): Promise<void> {}
}

/** RolloutService on the simulated engine. */
export class SimRollout extends RolloutService {
  protected override startEngine(): Promise<TensorEngine> {
    return Promise.resolve(new SimEngine() as unknown as TensorEngine);
  }
}

/** TrainerService on the simulated engine. */
export class SimTrainer extends TrainerService {
  protected override startEngine(): Promise<TensorEngine> {
    return Promise.resolve(new SimEngine() as unknown as TensorEngine);
  }
}
