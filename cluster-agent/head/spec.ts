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

/** Bounds a declaration must keep (a typo like warmup: 10000 or idleTimeout: 1e15 is refused, not attempted). */
export const SERVICE_LIMITS = {
  warmup: 1024,
  max: 4096,
  concurrency: 1024,
  maxQueued: 1_000_000,
  /** Every duration: deadlines and the idle timeout (a week). */
  timeoutMs: 7 * 24 * 3_600_000,
  /** Characters of a module path or URL (a data: URL module included). */
  moduleChars: 65_536,
  /** Characters of the exported class's name. */
  exportChars: 256,
  /** Characters of a resreq text. */
  resreqChars: 1024,
} as const;

/**
 * Parses and checks a wire service spec: every field has a type and a range,
 * and an error names the field, the value given and the range allowed.
 * Throws ServiceConfigError or ResreqError.
 */
export function parseServiceSpec(raw: Record<string, unknown>): ServiceSpec {
  const name = raw.name;
  if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,128}$/.test(name)) {
    throw new ServiceConfigError(`service name must be 1-128 characters of letters, digits, '_', '.', '-'; got ${show(name)}`, { field: "name" });
  }
  const fail = (field: string, rule: string, v: unknown): never => {
    throw new ServiceConfigError(`service '${name}': ${field} must be ${rule}; got ${show(v)}`, { service: name, field });
  };
  const module = raw.module;
  if (typeof module !== "string" || module.length === 0 || module.length > SERVICE_LIMITS.moduleChars || module.includes("\0")) {
    fail("module", `a module path or URL of 1 to ${SERVICE_LIMITS.moduleChars} characters without NUL`, module);
  }
  const exportName = raw.export;
  if (typeof exportName !== "string" || exportName.length > SERVICE_LIMITS.exportChars || !/^[A-Za-z_$][\w$]*$/.test(exportName)) {
    fail("export", `the name of the exported class: a JavaScript identifier of 1 to ${SERVICE_LIMITS.exportChars} characters`, exportName);
  }
  let project: { hash: string; key: string } | undefined;
  if (raw.project !== undefined && raw.project !== null) {
    const pr = raw.project as { hash?: unknown; key?: unknown };
    if (typeof pr !== "object" || typeof pr.hash !== "string" || !/^[0-9a-f]{16,64}$/.test(pr.hash) || pr.key !== `_projects/${pr.hash}`) {
      fail("project", "{ hash, key } of a packed project: hash 16 to 64 hex digits, key '_projects/<hash>'", raw.project);
    }
    project = { hash: pr.hash as string, key: pr.key as string };
  }
  const resreq = raw.resreq === undefined || raw.resreq === null ? "" : raw.resreq;
  if (typeof resreq !== "string" || resreq.length > SERVICE_LIMITS.resreqChars) fail("resreq", `a string like "cpu=8,mem=64g,gpu=1" of at most ${SERVICE_LIMITS.resreqChars} characters`, resreq);
  const autoscale = raw.autoscale ?? SERVICE_DEFAULTS.autoscale;
  if (typeof autoscale !== "boolean") fail("autoscale", "true or false", autoscale);
  const warmup = intOption(fail, "warmup", raw.warmup, SERVICE_DEFAULTS.warmup, autoscale ? 0 : 1, SERVICE_LIMITS.warmup);
  const max = raw.max === undefined || raw.max === null ? Infinity : intOption(fail, "max", raw.max, 0, 1, SERVICE_LIMITS.max);
  if (max < warmup) throw new ServiceConfigError(`service '${name}': max (${max}) is below warmup (${warmup})`, { service: name, field: "max" });
  if (!autoscale && raw.max !== undefined && raw.max !== null && max !== warmup) {
    throw new ServiceConfigError(`service '${name}': a gang (autoscale: false) has exactly warmup members; drop 'max'`, { service: name, field: "max" });
  }
  const idleTimeoutMs = durationOption(fail, "idleTimeout", raw.idleTimeoutMs, SERVICE_DEFAULTS.idleTimeoutMs, 0);
  const concurrency = intOption(fail, "concurrency", raw.concurrency, SERVICE_DEFAULTS.concurrency, 1, SERVICE_LIMITS.concurrency);
  const callTimeoutMs = raw.callTimeoutMs === undefined || raw.callTimeoutMs === null ? null : durationOption(fail, "callTimeoutMs", raw.callTimeoutMs, 0, 1);
  const initTimeoutMs = durationOption(fail, "initTimeoutMs", raw.initTimeoutMs, SERVICE_DEFAULTS.initTimeoutMs, 1);
  const maxQueued = intOption(fail, "maxQueued", raw.maxQueued, SERVICE_DEFAULTS.maxQueued, 1, SERVICE_LIMITS.maxQueued);
  const elastic = raw.elastic ?? false;
  if (typeof elastic !== "boolean") fail("elastic", "true or false", elastic);
  const drivesApp = raw.drivesApp ?? false;
  if (typeof drivesApp !== "boolean") fail("drivesApp", "true or false", drivesApp);
  return {
    name,
    module: module as string,
    project,
    exportName: exportName as string,
    resreq: resreq as string,
    resources: parseResreq(resreq as string),
    warmup,
    autoscale: autoscale as boolean,
    max: autoscale ? max : warmup,
    idleTimeoutMs,
    concurrency,
    callTimeoutMs,
    initTimeoutMs,
    maxQueued,
    elastic: elastic as boolean,
    drivesApp: drivesApp as boolean,
  };
}

type Fail = (field: string, rule: string, v: unknown) => never;

function intOption(fail: Fail, key: string, v: unknown, dflt: number, min: number, max: number): number {
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) fail(key, `a whole number from ${min} to ${max}`, v);
  return v as number;
}

/** A duration in ms, from `min` to a week: a timer can hold it and a typo cannot park resources for ages. */
function durationOption(fail: Fail, key: string, v: unknown, dflt: number, min: 0 | 1): number {
  if (v === undefined || v === null) return dflt;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > SERVICE_LIMITS.timeoutMs) {
    fail(key, `${min === 0 ? "a non-negative" : "a positive"} number of milliseconds, at most ${SERVICE_LIMITS.timeoutMs} (7 days)`, v);
  }
  return v as number;
}

/** A value as an error shows it: JSON, cut to 80 characters (a 64 KiB module path is not repeated back). */
function show(v: unknown): string {
  const text = typeof v === "number" && !Number.isFinite(v) ? String(v) : (JSON.stringify(v) ?? String(v));
  return text.length > 80 ? `${text.slice(0, 80)}… (${text.length} characters)` : text;
}
