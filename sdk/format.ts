/**
 * Text formatting every hearth process shares: byte counts in messages, log
 * lines cut to a bound (peers control much of what the head and agents log:
 * names, bad fields), and durations on command lines. Imports only the base
 * error class, so any layer may use it.
 */
import { HearthError } from "./errors/hearth-error.js";

/** Longest log line the head and agents write; peers control much of what is logged (names, bad fields). */
export const LOG_LINE_LIMIT = 4096;

/** Cuts `line` to LOG_LINE_LIMIT characters, saying how much was dropped, and keeps it on one line. */
export function truncateLogLine(line: string, limit = LOG_LINE_LIMIT): string {
  const flat = line.replace(/[\r\n]+/g, " ⏎ ");
  return flat.length <= limit ? flat : `${flat.slice(0, limit)}… [${flat.length - limit} more characters]`;
}

/** Human-readable byte count: 131072 → "128 KiB". */
export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${units[i]}`;
}

/** Parses a duration flag: "30m", "90s", "2h", "500ms" or a plain number of milliseconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new HearthError(`bad duration '${text}': use e.g. 500ms, 90s, 30m or 2h`);
  const scale = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? "ms"]!;
  return Number(m[1]) * scale;
}
