/**
 * Tables in notebooks: arquero renders the HTML (escaped, aligned by type),
 * the same rows render as aligned text for text/plain.
 */
import { from, type ColumnTable } from "arquero";
import { JUPYTER_DISPLAY, type MimeBundle } from "./display.js";
import { escapeHtml, textTable } from "./text.js";

/** Options of table(). */
export interface TableOptions {
  /** Rows shown (default 50); the rest are counted in a footer. */
  limit?: number;
  /** Columns shown, in order (default: all). */
  columns?: string[];
  /** A caption above the table. */
  title?: string;
}

/** A table that renders as HTML (text/html) and aligned text (text/plain). */
export class DataTable {
  /** The arquero table holding the rows. */
  readonly data: ColumnTable;
  private readonly opts: TableOptions;

  constructor(data: ColumnTable, opts: TableOptions = {}) {
    this.data = opts.columns ? data.select(...opts.columns) : data;
    this.opts = opts;
  }

  /** Number of rows. */
  get numRows(): number {
    return this.data.numRows();
  }

  /** Column names, in order. */
  get columns(): string[] {
    return this.data.columnNames();
  }

  /** The rows as plain objects. */
  rows(): Record<string, unknown>[] {
    return this.data.objects() as Record<string, unknown>[];
  }

  [JUPYTER_DISPLAY](): MimeBundle {
    const limit = this.opts.limit ?? 50;
    const n = this.numRows;
    const more = n > limit ? `${n - limit} more row(s) of ${n}` : "";
    const shown = this.data.objects({ limit }) as Record<string, unknown>[];
    const cols = this.columns;
    const caption = this.opts.title ? `<p><b>${escapeHtml(this.opts.title)}</b></p>` : "";
    const html = `<div class="hearth-table">${caption}${this.data.toHTML({ limit })}${more ? `<p><i>${more}</i></p>` : ""}</div>`;
    const text = [this.opts.title ?? "", textTable(cols, shown.map((r) => cols.map((c) => r[c]))), more].filter(Boolean).join("\n");
    return { "text/plain": text, "text/html": html };
  }
}

/** A displayable table from rows (objects) or an arquero table. */
export function table(rows: ColumnTable | ReadonlyArray<object>, opts: TableOptions = {}): DataTable {
  return new DataTable(Array.isArray(rows) ? from(rows as object[]) : (rows as ColumnTable), opts);
}
