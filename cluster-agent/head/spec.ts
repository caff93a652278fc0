/**
 * Validation of a service declaration as it arrives on the wire. The SDK
 * checks the same rules first, so users see errors before anything is sent;
 * the head checks again because any client may connect.
 */
import { ServiceConfigError } from "../../sdk/errors/index.js";
import { parseResreq } from "../../sdk/runtime/resreq.js";
import type { ServiceSpec } from "./records.js";

/** Defaults applied to options a driver leaves out. */
export const SERVICE_DEFAULTS = { warmup: 1, autoscale: true, idleTimeoutMs: 60_000, concurrency: 1, initTimeoutMs: 10 * 60_000, maxQueued: 10_000 } as const;

/** Upper bounds a declaration may ask for (a typo like warmup: 10000 is refused, not attempted). */
export const SERVICE_LIMITS = { warmup: 1024, max: 4096, concurrency: 1024, maxQueued: 1_000_000, timeoutMs: 7 * 24 * 3_600_000 } as const;

/** Parses and checks a wire service spec; throws ServiceConfigError or ResreqError. */
export function parseServiceSpec(raw: Record<string, unknown>): ServiceSpec {
  const name = raw.name;
  if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,128}$/.test(name)) {
    throw new ServiceConfigError(`service name must be 1-128 characters of letters, digits, '_', '.', '-'; got ${JSON.stringify(name)}`);
  }
  const module = raw.module;
  if (typeof module !== "string" || module === "") throw new ServiceConfigError(`service '${name}': 'module' must be a module path`, { service: name });
  const exportName = raw.export;
  if (typeof exportName !== "string" || exportName === "") throw new ServiceConfigError(`service '${name}': 'export' must name the exported class`, { service: name });
  let project: { hash: string; key: string } | undefined;
  if (raw.project !== undefined && raw.project !== null) {
    const pr = raw.project as { hash?: unknown; key?: unknown };
    if (typeof pr !== "object" || typeof pr.hash !== "string" || typeof pr.key !== "string") {
      throw new ServiceConfigError(`service '${name}': 'project' must be { hash, key } of a packed project`, { service: name });
    }
    project = { hash: pr.hash, key: pr.key };
  }
  const resreq = raw.resreq === undefined || raw.resreq === null ? "" : raw.resreq;
  if (typeof resreq !== "string") throw new ServiceConfigError(`service '${name}': resreq must be a string like "cpu=8,mem=64g,gpu=1"`, { service: name });
  const autoscale = raw.autoscale ?? SERVICE_DEFAULTS.autoscale;
  if (typeof autoscale !== "boolean") throw new ServiceConfigError(`service '${name}': autoscale must be true or false`, { service: name });
  const warmup = intOption(name, "warmup", raw.warmup, SERVICE_DEFAULTS.warmup, autoscale ? 0 : 1, SERVICE_LIMITS.warmup);
  const max = raw.max === undefined || raw.max === null ? Infinity : intOption(name, "max", raw.max, 0, 1, SERVICE_LIMITS.max);
  if (max < warmup) throw new ServiceConfigError(`service '${name}': max (${max}) is below warmup (${warmup})`, { service: name });
  if (!autoscale && raw.max !== undefined && raw.max !== null && max !== warmup) {
    throw new ServiceConfigError(`service '${name}': a gang (autoscale: false) has exactly warmup members; drop 'max'`, { service: name });
  }
  const idleTimeoutMs = numOption(name, "idleTimeout", raw.idleTimeoutMs, SERVICE_DEFAULTS.idleTimeoutMs);
  const concurrency = intOption(name, "concurrency", raw.concurrency, SERVICE_DEFAULTS.concurrency, 1, SERVICE_LIMITS.concurrency);
  const callTimeoutMs = raw.callTimeoutMs === undefined || raw.callTimeoutMs === null ? null : deadlineOption(name, "callTimeoutMs", raw.callTimeoutMs);
  const initTimeoutMs = raw.initTimeoutMs === undefined || raw.initTimeoutMs === null ? SERVICE_DEFAULTS.initTimeoutMs : deadlineOption(name, "initTimeoutMs", raw.initTimeoutMs);
  const maxQueued = intOption(name, "maxQueued", raw.maxQueued, SERVICE_DEFAULTS.maxQueued, 1, SERVICE_LIMITS.maxQueued);
  const elastic = raw.elastic ?? false;
  if (typeof elastic !== "boolean") throw new ServiceConfigError(`service '${name}': elastic must be true or false`, { service: name });
  return {
    name,
    module,
    project,
    exportName,
    resreq,
    resources: parseResreq(resreq),
    warmup,
    autoscale,
    max: autoscale ? max : warmup,
    idleTimeoutMs,
    concurrency,
    callTimeoutMs,
    initTimeoutMs,
    maxQueued,
    elastic,
  };
}

function intOption(service: string, key: string, v: unknown, dflt: number, min: number, max: number): number {
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
    throw new ServiceConfigError(`service '${service}': ${key} must be a whole number from ${min} to ${max}; got ${JSON.stringify(v)}`, { service });
  }
  return v;
}

/** A deadline in ms: positive and finite (at most a week), so a timer can hold it. */
function deadlineOption(service: string, key: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v <= 0 || v > SERVICE_LIMITS.timeoutMs) {
    throw new ServiceConfigError(`service '${service}': ${key} must be a positive number of milliseconds (at most ${SERVICE_LIMITS.timeoutMs}); got ${JSON.stringify(v)}`, { service });
  }
  return v;
}

function numOption(service: string, key: string, v: unknown, dflt: number): number {
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
    throw new ServiceConfigError(`service '${service}': ${key} must be a non-negative number of milliseconds; got ${JSON.stringify(v)}`, { service });
  }
  return v;
}
