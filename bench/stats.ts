/** Small helpers shared by the benchmarks. */

/** The q-quantile (0..1) of a list of numbers. */
export function quantile(values: number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

/** Prints rows as an aligned table. */
export function table(rows: Array<Record<string, string | number>>): string {
  const cols = Object.keys(rows[0] ?? {});
  const cell = (v: string | number): string => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(2)) : v);
  const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]!).length)));
  const line = (vals: string[]): string => vals.map((v, i) => v.padEnd(width[i]!)).join("  ");
  return [line(cols), line(width.map((w) => "-".repeat(w))), ...rows.map((r) => line(cols.map((c) => cell(r[c]!))))].join("\n");
}
