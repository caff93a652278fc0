/**
 * Per-row sampling seeds derived from what a row is, not from who samples it.
 *
 * `SamplingOptions.seeds` makes a row's draws depend on its seed and tokens only
 * (see docs/engine.md, "Per-row seeds"). For a run to repeat whatever the load, the
 * seed itself must come from the row's identity, e.g. (run seed, step, prompt
 * index, sample index), never from an executor id, a call counter or the time.
 * `deriveSeed` hashes such a tuple to a seed the engine accepts.
 */

const MASK = (1n << 64n) - 1n;
const GOLDEN = 0x9e3779b97f4a7c15n;

/** splitmix64's finaliser on a 64-bit unsigned BigInt (a bijection, so distinct inputs stay distinct). */
function mix(z: bigint): bigint {
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
  return z ^ (z >> 31n);
}

/**
 * A seed in [0, 2^53) (a safe integer, as `SamplingOptions.seeds` needs) from an
 * ordered tuple of integers, e.g. `deriveSeed(runSeed, step, promptIndex, sampleIndex)`.
 * The same parts always give the same seed; order matters. Throws a RangeError
 * for a part that is not a safe integer.
 */
export function deriveSeed(...parts: readonly number[]): number {
  if (parts.length === 0) throw new RangeError("deriveSeed needs at least one part (e.g. runSeed, step, prompt, sample)");
  let h = mix(BigInt(parts.length) + GOLDEN);
  parts.forEach((p, i) => {
    if (!Number.isSafeInteger(p)) throw new RangeError(`deriveSeed part ${i} = ${String(p)}: each part must be a safe integer`);
    h = mix(h ^ mix((BigInt.asUintN(64, BigInt(p)) + GOLDEN) & MASK));
  });
  return Number(h >> 11n);
}
