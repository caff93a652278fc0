/**
 * Resource requests: `"cpu=8,mem=64g,gpu=1"` ↔ `{ cpu: 8, mem: 68719476736, gpu: 1 }`.
 * Parsing is strict: unknown keys, repeated keys, bad numbers and bad units are
 * errors that say what was wrong and what is accepted.
 */
import { ResreqError } from "../errors/index.js";

/** A parsed resource request; `mem` is in bytes. */
export interface Resources {
  cpu: number;
  mem: number;
  gpu: number;
}

/**
 * The smallest cpu share an executor may ask for. `cpu=0` would let any
 * number of executors pile onto one node (placement never runs out), so it is
 * refused; 0.01 still packs a hundred light executors per core.
 */
export const MIN_CPU = 0.01;
/** Upper bounds per executor (no node has more; a typo like cpu=8000 is refused with a clear error). */
export const MAX_RESOURCES: Readonly<Resources> = { cpu: 4096, mem: 64 * 1024 ** 4, gpu: 64 };

/** What a service gets when its resreq leaves a key out. */
export const DEFAULT_RESOURCES: Readonly<Resources> = { cpu: 1, mem: 0, gpu: 0 };

const KEYS = ["cpu", "mem", "gpu"] as const;
const MEM_UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tb: 1024 ** 4,
  tib: 1024 ** 4,
};

/** Parses a memory size like `64g`, `512m`, `1.5GiB` or `1048576` into bytes. */
export function parseMem(text: string, context = text): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = m?.[2]?.toLowerCase() ?? "";
  if (!m || !(unit in MEM_UNITS)) {
    throw new ResreqError(
      `bad memory size '${text}' in "${context}": use a number with an optional unit k, m, g or t (e.g. mem=64g)`,
      { resreq: context },
    );
  }
  return Math.round(Number(m[1]) * MEM_UNITS[unit]!);
}

/** Parses a resreq string; an empty string means the defaults. */
export function parseResreq(text: string | undefined): Resources {
  const out: Resources = { ...DEFAULT_RESOURCES };
  if (text === undefined || text.trim() === "") return out;
  if (typeof text !== "string") throw new ResreqError(`resreq must be a string like "cpu=8,mem=64g,gpu=1"`, { resreq: String(text) });
  const seen = new Set<string>();
  for (const part of text.split(",")) {
    const item = part.trim();
    if (item === "") continue;
    const eq = item.indexOf("=");
    if (eq <= 0) {
      throw new ResreqError(`bad resreq item '${item}' in "${text}": expected key=value, e.g. "cpu=8,mem=64g,gpu=1"`, { resreq: text });
    }
    const key = item.slice(0, eq).trim().toLowerCase();
    const value = item.slice(eq + 1).trim();
    if (!(KEYS as readonly string[]).includes(key)) {
      throw new ResreqError(`unknown resource '${key}' in resreq "${text}": known keys are ${KEYS.join(", ")}`, { resreq: text });
    }
    if (seen.has(key)) throw new ResreqError(`resource '${key}' is given twice in resreq "${text}"`, { resreq: text });
    seen.add(key);
    if (key === "mem") {
      out.mem = parseMem(value, text);
    } else {
      const n = Number(value);
      if (value === "" || !Number.isFinite(n) || n < 0) {
        throw new ResreqError(`bad value '${value}' for ${key} in resreq "${text}": expected a non-negative number`, { resreq: text });
      }
      if (key === "gpu" && !Number.isInteger(n)) {
        throw new ResreqError(`gpu must be a whole number of devices, got '${value}' in resreq "${text}"`, { resreq: text });
      }
      if (key === "cpu" && n < MIN_CPU) {
        throw new ResreqError(`cpu must be at least ${MIN_CPU} (a share of one core), got '${value}' in resreq "${text}"; cpu=0 would let executors pile up without limit`, { resreq: text });
      }
      out[key as "cpu" | "gpu"] = n;
    }
  }
  for (const key of KEYS) {
    if (out[key] > MAX_RESOURCES[key]) {
      throw new ResreqError(`${key} in resreq "${text}" is over the per-executor maximum (${key === "mem" ? formatMem(MAX_RESOURCES.mem) : MAX_RESOURCES[key]})`, { resreq: text });
    }
  }
  return out;
}

/** Formats resources back into resreq syntax (`cpu=2,mem=4g,gpu=1`). */
export function formatResources(r: Resources): string {
  const parts = [`cpu=${r.cpu}`];
  if (r.mem > 0) parts.push(`mem=${formatMem(r.mem)}`);
  if (r.gpu > 0) parts.push(`gpu=${r.gpu}`);
  return parts.join(",");
}

/** Bytes → the shortest exact resreq memory string (`68719476736` → `64g`). */
export function formatMem(bytes: number): string {
  for (const [unit, size] of [["t", 1024 ** 4], ["g", 1024 ** 3], ["m", 1024 ** 2], ["k", 1024]] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`;
  }
  if (bytes >= 1024 ** 3) return `${(bytes / 1024 ** 3).toFixed(1)}g`;
  return `${bytes}`;
}

/** True when `need` fits inside `have` on every dimension. */
export function fits(need: Resources, have: Resources): boolean {
  return need.cpu <= have.cpu + 1e-9 && need.mem <= have.mem && need.gpu <= have.gpu;
}
