/**
 * The head's runtime state on disk (`<data dir>/runtime/state.json`): the
 * apps, the specs of their live services (with a gang's rendezvous), and the
 * id ceilings. It is what a head restarted on the same data dir needs to
 * rebuild its registry before the agents report their live executors
 * (recovery.ts). Written whole (temporary file + rename, so a crash leaves
 * the old or the new version, never half of one) whenever apps or services
 * change; calls and executors are not written (the agents report executors,
 * and calls in flight end with the head: see docs/architecture.md).
 */
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { StateFileError } from "../../sdk/errors/index.js";
import type { IdCounter } from "./ids.js";
import type { AppRecord, ServiceRecord, ServiceSpec } from "./records.js";
import { parseServiceSpec } from "./spec.js";

/** How far above the current counters each persisted ceiling is (so the file is rewritten rarely). */
export const ID_BLOCKS = { service: 1_000, executor: 1_000, hid: 1_000_000 } as const;

/** A service as persisted. */
export interface PersistedService {
  id: string;
  app: string;
  seq: number;
  createdAt: number;
  /** A gang whose members were granted (and so must come back whole, or fail). */
  started: boolean;
  rendezvous?: { host: string; port: number };
  spec: ServiceSpec;
}

/** What a head restarted on the same data dir starts from. */
export interface PersistedState {
  apps: Array<{ name: string; keepAliveMs: number; createdAt: number }>;
  services: PersistedService[];
  /** First ids the previous instance had not handed out. */
  next: { service: number; executor: number; hid: number };
}

/** The counters and registry the state file covers. */
export interface PersistedRegistry {
  apps: Map<string, AppRecord>;
  ids: { service: IdCounter; executor: IdCounter };
  hids: IdCounter;
}

/** Reads and writes the runtime state file of one data dir. */
export class StateFile {
  /** The file's path. */
  readonly file: string;

  constructor(
    dataDir: string,
    private readonly registry: PersistedRegistry,
    private readonly log: (line: string) => void,
  ) {
    this.file = path.join(dataDir, "runtime", "state.json");
  }

  /**
   * Reads the state a previous instance left (undefined when there is none),
   * moves the counters to its ceilings, and writes the new ceilings before
   * any id is handed out. A file that does not parse is logged and ignored
   * (the head starts empty); a service whose spec no longer validates is
   * skipped. From then on every counter persists its ceiling before passing it.
   */
  open(): PersistedState | undefined {
    mkdirSync(path.dirname(this.file), { recursive: true, mode: 0o700 });
    let state: PersistedState | undefined;
    let text: string | undefined;
    try {
      text = readFileSync(this.file, "utf8");
    } catch {
      text = undefined; // first start on this data dir
    }
    if (text !== undefined) {
      try {
        state = parseState(JSON.parse(text), this.log, this.file);
      } catch (err) {
        this.log(`ignoring the runtime state in ${this.file}: ${(err as Error).message}`);
      }
    }
    const r = this.registry;
    if (state) {
      r.ids.service.next = Math.max(r.ids.service.next, state.next.service);
      r.ids.executor.next = Math.max(r.ids.executor.next, state.next.executor);
      r.hids.next = Math.max(r.hids.next, state.next.hid);
    }
    for (const c of [r.ids.service, r.ids.executor, r.hids]) c.onCeiling = () => this.save();
    this.save();
    return state;
  }

  /** Writes the apps, their live services and fresh id ceilings. */
  save(): void {
    const r = this.registry;
    r.ids.service.ceiling = r.ids.service.next + ID_BLOCKS.service;
    r.ids.executor.ceiling = r.ids.executor.next + ID_BLOCKS.executor;
    r.hids.ceiling = r.hids.next + ID_BLOCKS.hid;
    const apps = [...r.apps.values()];
    const state = {
      version: 1,
      savedAt: new Date().toISOString(),
      next: { service: r.ids.service.ceiling, executor: r.ids.executor.ceiling, hid: r.hids.ceiling },
      apps: apps.map((a) => ({ name: a.name, keepAliveMs: a.keepAliveMs, createdAt: a.createdAt })),
      services: apps.flatMap((a) => [...a.services.values()].filter(live).map(persistService)),
    };
    const tmp = `${this.file}.tmp`;
    try {
      writeFileSync(tmp, JSON.stringify(state, (_k, v: unknown) => (v === Infinity ? null : v)), { mode: 0o600 });
      renameSync(tmp, this.file);
    } catch (err) {
      // A full or broken disk must not take the head down; a restart then recovers less.
      this.log(`could not write the runtime state ${this.file}: ${(err as Error).message}`);
    }
  }
}

function live(s: ServiceRecord): boolean {
  return s.state !== "failed" && s.state !== "stopped";
}

function persistService(s: ServiceRecord): PersistedService {
  return { id: s.id, app: s.app, seq: s.seq, createdAt: s.createdAt, started: s.state !== "pending", rendezvous: s.rendezvous, spec: s.spec };
}

/** Checks a state file's content (it is data from disk: every field is validated). */
function parseState(raw: unknown, log: (line: string) => void, file: string): PersistedState {
  const o = raw as Record<string, unknown> | null;
  if (o === null || typeof o !== "object" || o.version !== 1) throw new StateFileError(`${file} is not a version 1 state file`, { file });
  const next = o.next as Record<string, unknown> | undefined;
  const counter = (k: string): number => {
    const v = next?.[k];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) throw new StateFileError(`${file}: next.${k} is not a positive integer`, { file });
    return v;
  };
  const apps: PersistedState["apps"] = [];
  for (const a of Array.isArray(o.apps) ? (o.apps as Array<Record<string, unknown>>) : []) {
    if (typeof a?.name !== "string" || !/^[A-Za-z0-9_.-]{1,128}$/.test(a.name) || typeof a.keepAliveMs !== "number" || !(a.keepAliveMs >= 0)) {
      log(`runtime state: skipping a malformed app entry ${JSON.stringify(a)?.slice(0, 200)}`);
      continue;
    }
    apps.push({ name: a.name, keepAliveMs: a.keepAliveMs, createdAt: typeof a.createdAt === "number" ? a.createdAt : Date.now() });
  }
  const services: PersistedService[] = [];
  for (const s of Array.isArray(o.services) ? (o.services as Array<Record<string, unknown>>) : []) {
    try {
      if (typeof s?.id !== "string" || !/^s\d+$/.test(s.id) || typeof s.app !== "string" || !apps.some((a) => a.name === s.app)) throw new StateFileError("bad id or app", { file });
      const spec = s.spec as Record<string, unknown>;
      const parsed = parseServiceSpec({ ...spec, export: spec.exportName });
      const rv = s.rendezvous as { host?: unknown; port?: unknown } | undefined;
      const rendezvous = rv && typeof rv.host === "string" && typeof rv.port === "number" ? { host: rv.host, port: rv.port } : undefined;
      services.push({ id: s.id, app: s.app, seq: typeof s.seq === "number" ? s.seq : 0, createdAt: typeof s.createdAt === "number" ? s.createdAt : Date.now(), started: s.started === true, rendezvous, spec: parsed });
    } catch (err) {
      log(`runtime state: skipping service ${JSON.stringify(s?.id)}: ${(err as Error).message}`);
    }
  }
  return { apps, services, next: { service: counter("service"), executor: counter("executor"), hid: counter("hid") } };
}
