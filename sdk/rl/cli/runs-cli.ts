/**
 * `hearth runs | attach | pause | resume | stop | fetch`: the command line of
 * runs that live on the cluster (started with `hearth train search-r1 …
 * --detach`). Each command opens the run's app as its driver, acts, and
 * leaves; the run never depends on it.
 */
import { parseArgs } from "node:util";
import { findLocalCluster, hearthHome } from "../../engines/local.js";
import { findSlurmHead } from "../../engines/slurm/index.js";
import { CURVE_KEYS_ENV } from "../../wire/curve.js";
import { HearthError } from "../../errors/index.js";
import { stepRow } from "../report/report.js";
import { parseDuration } from "../../format.js";
import { attachRun, controlRun, fetchRun, listRuns, stopRun, STOP_WAIT_MS, type AttachedRunListing, type RunListing } from "../cluster/detached.js";
import type { LoopEvent, LoopStatus } from "../state/run-log.js";

/** Usage of the run commands. */
export const RUNS_USAGE = `runs    [--head ENDPOINT] [--json]            every detached run: name, state, step of total, last held-out EM, started, where its loop runs (admin)
  attach  NAME [--head ENDPOINT]                the run's history so far, then its live progress; Ctrl-C detaches (the run goes on)
  pause|resume NAME [--head ENDPOINT]           hold the run after its step / let it go on
  stop    NAME [--timeout 10m] [--no-wait] [--head ENDPOINT]
                                                end it after its step (metrics, checkpoint, report; services released) and wait
                                                until it has (its progress printed; exit 1 if it failed or is still stopping at
                                                --timeout); --no-wait returns once the loop has the request
  fetch   NAME --out DIR [--head ENDPOINT]      write a finished run's outputs (metrics.jsonl, report, checkpoint) into DIR`;

/** The head: --head, HEARTH_HEAD, the local cluster's, or the Slurm head of this HEARTH_HOME (whose CURVE keys this process then uses). */
export function headOf(given: string | undefined): string {
  const endpoint = given ?? process.env.HEARTH_HEAD ?? findLocalCluster()?.endpoint;
  if (endpoint) return endpoint;
  const slurm = findSlurmHead(hearthHome());
  if (!slurm) throw new HearthError("no local head is running (start one with `hearth up`), no Slurm head of this HEARTH_HOME runs, and no --head was given");
  if (slurm.curveKeys && !process.env[CURVE_KEYS_ENV]) process.env[CURVE_KEYS_ENV] = slurm.curveKeys;
  return slurm.endpoint;
}

function nameOf(command: string, positionals: string[]): string {
  const name = positionals[0];
  if (!name || positionals.length > 1) throw new HearthError(`usage: hearth ${command} NAME [--head ENDPOINT]${command === "fetch" ? " --out DIR" : ""}`);
  return name;
}

/** One line of a run's log, as `hearth attach` prints it. */
export function eventLine(e: LoopEvent): string | undefined {
  switch (e.type) {
    case "log": return e.text;
    case "state": return `[${e.state}${e.why ? `: ${e.why}` : ""}]`;
    case "step": return stepRow(e.metrics);
    case "eval": return `held-out EM at step ${e.step}: ${(e.em * 100).toFixed(1)}% (${e.calls ?? "tool calls"}/sample ${e.callsPerSample.toFixed(2)})`;
    case "warmstart": return e.cached ? "warm start loaded from the cache" : e.step === e.total ? `warm start ${e.step}/${e.total} done` : undefined;
    default: return undefined;
  }
}

function isDriven(s: RunListing): s is AttachedRunListing {
  return s.state === "attached" || s.state === "idle";
}

/** One line of `hearth runs`. */
export function runLine(s: RunListing): string {
  const em = s.evalEm !== undefined ? `${(s.evalEm * 100).toFixed(1)}% @${s.evalStep}` : "-";
  if (isDriven(s)) {
    const where = s.state === "attached" ? `its loop runs in ${s.drivers} driver(s) outside the cluster` : "no driver: its executors wait for the app's keep-alive";
    return `${s.name.padEnd(20)} ${s.state.padEnd(10)} ${`${s.step}/?`.padStart(9)}  EM ${em.padEnd(12)} ${"-".padEnd(24)}  ${where}`;
  }
  const state = s.state === "failed" ? `failed: ${s.why ?? "?"}` : s.state;
  return `${s.name.padEnd(20)} ${state.padEnd(10)} ${`${s.step}/${s.total}`.padStart(9)}  EM ${em.padEnd(12)} ${new Date(s.startedAt).toISOString()}  ${s.where.host} (${s.where.executorId})${s.takeovers ? ` [${s.takeovers.length} takeover(s)]` : ""}`;
}

/** Runs one of the run commands; returns the exit code. */
export async function runRunsCommand(command: "runs" | "attach" | "pause" | "resume" | "stop" | "fetch", args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { head: { type: "string" }, json: { type: "boolean" }, out: { type: "string" }, timeout: { type: "string" }, "no-wait": { type: "boolean" } }, allowPositionals: true, strict: true });
  } catch (err) {
    throw new HearthError(`${(err as Error).message}\nusage: hearth ${RUNS_USAGE}`);
  }
  const { values, positionals } = parsed;
  if (command !== "stop" && (values.timeout !== undefined || values["no-wait"])) throw new HearthError(`--timeout and --no-wait are flags of hearth stop\nusage: hearth ${RUNS_USAGE}`);
  if (values.timeout !== undefined && values["no-wait"]) throw new HearthError("hearth stop: --timeout is how long to wait, --no-wait not to: give one of them");
  const timeoutMs = values.timeout !== undefined ? parseDuration(values.timeout) : STOP_WAIT_MS;
  if (!(timeoutMs > 0)) throw new HearthError(`hearth stop --timeout must be more than 0; got '${values.timeout}'`);
  const head = headOf(values.head);
  switch (command) {
    case "runs": {
      const runs = await listRuns(head);
      if (values.json) console.log(JSON.stringify(runs, null, 2));
      else if (runs.length === 0) console.log("no Search-R1 runs on this cluster");
      else for (const r of runs) console.log(runLine(r));
      return 0;
    }
    case "attach": {
      const name = nameOf(command, positionals);
      const stop = new AbortController();
      const onSigint = (): void => stop.abort();
      process.on("SIGINT", onSigint);
      try {
        const final = await attachRun(name, (e) => {
          const line = eventLine(e);
          if (line !== undefined) console.log(line);
        }, { head, signal: stop.signal });
        if (stop.signal.aborted) console.log(`detached from '${name}' (${final.state}, step ${final.step}/${final.total}); it goes on: hearth attach ${name}`);
        return final.state === "failed" ? 1 : 0;
      } finally {
        process.off("SIGINT", onSigint);
      }
    }
    case "pause":
    case "resume": {
      const name = nameOf(command, positionals);
      const s = await controlRun(name, command, { head });
      const what = { pause: "pauses after its step in flight", resume: "goes on" }[command];
      console.log(`run '${name}' ${what} (was ${s.state} at step ${s.step}/${s.total})`);
      return 0;
    }
    case "stop": {
      const name = nameOf(command, positionals);
      if (values["no-wait"]) {
        const s = await stopRun(name, { head, wait: false });
        if (s.state === "done" || s.state === "failed") return ended(name, s);
        console.log(`run '${name}' stops after its step in flight, then writes its outputs and releases its services (was ${s.state} at step ${s.step}/${s.total}; not waiting)`);
        return 0;
      }
      // Like docker stop: returns once the run has ended, so `hearth stop NAME && hearth fetch NAME` works. Ctrl-C stops waiting, not the stop.
      console.log(`stopping run '${name}' after its step in flight (waiting up to ${Math.round(timeoutMs / 1000)} s; Ctrl-C stops waiting, the run still stops)`);
      const quit = new AbortController();
      const onSigint = (): void => quit.abort();
      process.on("SIGINT", onSigint);
      try {
        const s = await stopRun(name, { head, timeoutMs, signal: quit.signal, onEvent: (e) => {
          const line = eventLine(e);
          if (line !== undefined) console.log(line);
        } });
        if (quit.signal.aborted) {
          console.log(`stopped waiting: run '${name}' is ${s.state} at step ${s.step}/${s.total} and goes on stopping (hearth attach ${name} follows it)`);
          return 130;
        }
        return ended(name, s);
      } finally {
        process.off("SIGINT", onSigint);
      }
    }
    case "fetch": {
      const name = nameOf(command, positionals);
      if (!values.out) throw new HearthError(`usage: hearth fetch NAME --out DIR`);
      const bytes = await fetchRun(name, values.out, { head });
      console.log(`fetched run '${name}': ${bytes} bytes into ${values.out}`);
      return 0;
    }
  }
}

/** What `hearth stop` says of a run that has ended (done: 0; failed: 1). */
function ended(name: string, s: LoopStatus): number {
  if (s.state === "failed") {
    console.log(`run '${name}' failed: ${s.why ?? "?"}`);
    return 1;
  }
  console.log(`run '${name}' is done at step ${s.step}/${s.total}: hearth fetch ${name} --out DIR writes its outputs`);
  return 0;
}
