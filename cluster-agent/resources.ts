/**
 * What this node can offer: CPUs, memory and GPUs. Detected by default;
 * `hearth agent --cpus/--mem/--gpus` override any of them (tests declare GPU
 * slots on machines without GPUs).
 */
import { objectBuffers } from "../sdk/cache/buffers.js";
import { execFileSync } from "node:child_process";
import os from "node:os";
import { UsageError } from "../sdk/errors/index.js";

/** A node's advertised capacity; `gpus` are the device ids executors get in CUDA_VISIBLE_DEVICES. */
export interface NodeResources {
  cpu: number;
  mem: number;
  gpus: string[];
}

/** Detects GPUs: CUDA_VISIBLE_DEVICES if set (as under Slurm), else `nvidia-smi -L`, else none. */
export function detectGpus(env: NodeJS.ProcessEnv = process.env): string[] {
  const visible = env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined) return visible.split(",").map((s) => s.trim()).filter((s) => s !== "" && s !== "-1");
  try {
    const out = execFileSync("nvidia-smi", ["-L"], { encoding: "utf8", timeout: 5000, stdio: ["ignore", "pipe", "ignore"] });
    return out
      .split("\n")
      .filter((l) => /^GPU \d+:/.test(l))
      .map((l) => /^GPU (\d+):/.exec(l)![1]!);
  } catch {
    return [];
  }
}

/** Detects this node's resources. */
export function detectResources(): NodeResources {
  return { cpu: os.availableParallelism(), mem: os.totalmem(), gpus: detectGpus() };
}

/**
 * `--gpus` accepts a count (`4` → slots 0..3) or a list of ids (`0,2,3`).
 */
export function parseGpuFlag(text: string): string[] {
  const t = text.trim();
  if (/^\d+$/.test(t) && !t.includes(",")) return Array.from({ length: Number(t) }, (_, i) => String(i));
  const ids = t.split(",").map((s) => s.trim());
  if (ids.some((s) => !/^[\w-]+$/.test(s))) throw new UsageError(`--gpus must be a count (e.g. 4) or a list of device ids (e.g. 0,1); got '${text}'`, { flag: "--gpus" });
  return ids;
}

/** This process's memory for a heartbeat (bytes; the head's status shows it): V8's heap apart from the rest. */
export function memoryReport(): { rss: number; heapTotal: number; heapUsed: number; external: number; largestObjectBuffer: number } {
  const m = process.memoryUsage();
  // The largest buffer this process made for an object (sdk/cache/buffers.ts): large ones stream, so it stays small.
  return { rss: m.rss, heapTotal: m.heapTotal, heapUsed: m.heapUsed, external: m.external, largestObjectBuffer: objectBuffers.largest };
}
