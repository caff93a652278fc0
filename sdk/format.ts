/**
 * Text formatting every hearth process shares: byte counts in messages, and
 * log lines cut to a bound (peers control much of what the head and agents
 * log: names, bad fields). Imports nothing, so any layer may use it.
 */

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
