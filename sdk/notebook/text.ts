/**
 * Small renderers shared by the display helpers: HTML escaping, an HTML table
 * and an aligned plain-text table from the same rows.
 */

/** Escapes text for HTML element content and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** A cell as text: numbers trimmed to 4 significant decimals, null/undefined empty, objects as JSON. */
export function cellText(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** An HTML table with a header row; numbers right-aligned. */
export function htmlTable(columns: string[], rows: unknown[][], caption?: string): string {
  const align = (v: unknown) => (typeof v === "number" ? ' style="text-align: right"' : ' style="text-align: left"');
  const head = columns.map((c) => `<th>${escapeHtml(c)}</th>`).join("");
  const body = rows.map((r) => `<tr>${r.map((v) => `<td${align(v)}>${escapeHtml(cellText(v))}</td>`).join("")}</tr>`).join("");
  const cap = caption ? `<caption style="text-align: left">${escapeHtml(caption)}</caption>` : "";
  return `<table>${cap}<thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

/** An aligned plain-text table: header, a rule, then the rows (cells longer than `maxWidth` are cut with "…"). */
export function textTable(columns: string[], rows: unknown[][], maxWidth = 40): string {
  const cut = (s: string) => (s.length > maxWidth ? s.slice(0, maxWidth - 1) + "…" : s);
  const cells = rows.map((r) => r.map((v) => cut(cellText(v))));
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((r) => (r[i] ?? "").length)));
  const line = (r: string[]) => r.map((s, i) => s.padEnd(widths[i]!)).join("  ").trimEnd();
  return [line(columns), widths.map((w) => "-".repeat(w)).join("  "), ...cells.map(line)].join("\n");
}
