/**
 * How the engine's requests and replies are shaped on the TypeScript side:
 * option names in snake case, ragged rows as one flat tensor and their
 * lengths (and back), each generated token's alternatives split out of a
 * reply's flat arrays, per-row seeds checked where the caller can see them.
 */
import { EngineError } from "./errors.js";
import { int32Tensor, toFloat32Array, toInt32Array, type Tensor } from "./tensor.js";
import type { FinishReason, GeneratedRow, SamplingOptions } from "./types.js";

export function snake(options: object): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(options)) {
    if (v !== undefined) out[k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = v;
  }
  return out;
}

/** Refuse malformed per-row seeds here, with the row count the caller can see (the engine checks again). */
export function checkSeeds(sampling: SamplingOptions, rows: number | null, op: string): void {
  const seeds = sampling.seeds;
  if (seeds === undefined) return;
  const fail = (message: string): never => {
    throw new EngineError({ code: "bad_request", message }, { op });
  };
  if (!Array.isArray(seeds)) fail("seeds must be an array of integers, one per row");
  if (sampling.seed !== undefined) fail("pass either seed (one for the call) or seeds (one per row), not both");
  if (rows !== null && seeds.length !== rows) fail(`seeds has ${seeds.length} entries but the batch has ${rows} rows: pass one seed per row`);
  seeds.forEach((s, i) => {
    if (!Number.isSafeInteger(s) || s < 0) fail(`seeds[${i}] = ${String(s)}: each seed must be a non-negative safe integer`);
  });
}

export function ragged(rows: readonly (Int32Array | readonly number[])[]): { tokens: Tensor; lengths: Tensor } {
  const lengths = Int32Array.from(rows, (r) => r.length);
  const flat = new Int32Array(lengths.reduce((a, b) => a + b, 0));
  let at = 0;
  for (const r of rows) {
    flat.set(r, at);
    at += r.length;
  }
  return { tokens: int32Tensor(flat), lengths: int32Tensor(lengths) };
}

/** Rows of a generate, resume or batch reply (with each token's alternatives when they were asked for). */
export function unragged(result: Record<string, unknown>): GeneratedRow[] {
  const rows = unraggedRows(result);
  if (result.top_rows !== undefined) attachAlternatives(rows, result);
  return rows;
}

function unraggedRows(result: Record<string, unknown>): GeneratedRow[] {
  const tokens = toInt32Array(result.tokens as Tensor);
  const logprobs = toFloat32Array(result.logprobs as Tensor);
  const lengths = toInt32Array(result.lengths as Tensor);
  const reasons = result.finish_reasons as FinishReason[];
  const stops = result.stops as (string | null)[];
  const rows: GeneratedRow[] = [];
  let at = 0;
  lengths.forEach((n, i) => {
    rows.push({ tokens: tokens.slice(at, at + n), logprobs: logprobs.slice(at, at + n), finishReason: reasons[i], stop: stops[i] });
    at += n;
  });
  return rows;
}

/** Splits a batch reply's flat top-k arrays into each row's per-token alternatives. */
function attachAlternatives(rows: GeneratedRow[], result: Record<string, unknown>): void {
  const perRow = toInt32Array(result.top_rows as Tensor);
  const counts = toInt32Array(result.top_counts as Tensor);
  const ids = toInt32Array(result.top_ids as Tensor);
  const lps = toFloat32Array(result.top_logprobs as Tensor);
  const ent = toFloat32Array(result.entropy as Tensor);
  let tok = 0;
  let at = 0;
  rows.forEach((row, i) => {
    if (perRow[i] === 0) return;
    row.alternatives = [];
    for (let t = 0; t < perRow[i]!; t++, tok++) {
      const k = counts[tok]!;
      row.alternatives.push({ ids: ids.slice(at, at + k), logprobs: lps.slice(at, at + k), entropy: ent[tok]! });
      at += k;
    }
  });
}

