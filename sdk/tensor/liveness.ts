/**
 * Which tensor engines this process holds and whether each is alive, for the
 * executor host's heartbeats (executor-host.ts): the head fails a gang whose
 * rank lost its engine, and replaces a pool executor whose engine is gone.
 *
 * Every `TensorEngine` joins the registry once started and leaves it on
 * `close()`; an engine that died, was killed as hung (no heartbeat from its
 * process) or as wedged (a request past its deadline) stays in it, reported as
 * such, until its owner closes it. The registry lives on `globalThis` under a
 * `Symbol.for` key because a service module loaded through tsx may get its own
 * copy of this module: both copies must see one registry.
 */
import { readFileSync } from "node:fs";

/** The state of one engine, as heartbeats carry it. */
export type EngineState = "running" | "hung" | "wedged" | "exited";

/** One engine's liveness. */
export interface EngineLiveness {
  /** The engine's process id. */
  pid: number | null;
  /**
   * `running`: its process heartbeats; `hung`: no heartbeat from its process
   * for the hang timeout (stopped, frozen, a C call holding the GIL), so it
   * was killed; `wedged`: a request passed its deadline, so it was killed;
   * `exited`: its process ended on its own (crash, OOM, kill -9).
   */
  state: EngineState;
  /** Milliseconds since the engine's process last heartbeat. */
  silentMs: number;
  /** The oldest request in flight (what it was doing), if any. */
  op: string | null;
  /** Why it is not running (first line of its error), else null. */
  detail: string | null;
}

/** Something that can say how its engine is (a TensorEngine). */
export interface LivenessSource {
  liveness(): EngineLiveness;
}

type Listener = (change: EngineLiveness) => void;

interface Registry {
  engines: Set<LivenessSource>;
  listeners: Set<Listener>;
}

const KEY = Symbol.for("hearth.tensor-engine-liveness");

function registry(): Registry {
  const g = globalThis as { [KEY]?: Registry };
  return (g[KEY] ??= { engines: new Set(), listeners: new Set() });
}

/** Adds an engine to this process's registry (TensorEngine.start does this). */
export function trackEngine(engine: LivenessSource): void {
  registry().engines.add(engine);
}

/** Removes an engine (TensorEngine.close does this): a closed engine is not a lost one. */
export function untrackEngine(engine: LivenessSource): void {
  registry().engines.delete(engine);
}

/** Tells the listeners that a tracked engine stopped running (called once per engine). */
export function reportEngineChange(engine: LivenessSource): void {
  const r = registry();
  if (!r.engines.has(engine)) return;
  const change = engine.liveness();
  for (const listener of r.listeners) listener(change);
}

/** The liveness of every engine this process holds. */
export function engineLiveness(): EngineLiveness[] {
  return [...registry().engines].map((e) => e.liveness());
}

/** Calls `listener` synchronously whenever a tracked engine stops running; returns the unsubscribe function. */
export function onEngineChange(listener: Listener): () => void {
  const r = registry();
  r.listeners.add(listener);
  return () => r.listeners.delete(listener);
}

/** The first line of an error message, bounded, for a heartbeat. */
export function firstLine(message: string, max = 300): string {
  const line = message.split("\n", 1)[0] ?? "";
  return line.length > max ? `${line.slice(0, max)}…` : line;
}

/**
 * A process's scheduler state (`R`, `S`, `D`, `T` stopped, `Z`…) and the CPU
 * time it has used (user + system, in clock ticks), from /proc/PID/stat;
 * undefined where there is no /proc or the process is gone.
 */
export function processCpu(pid: number): { state: string; ticks: number } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (!rest[0] || !Number.isFinite(utime) || !Number.isFinite(stime)) return undefined;
  return { state: rest[0], ticks: utime + stime };
}
