/**
 * The root of hearth's error tree. Every error hearth raises on purpose is a
 * HearthError: it has a stable `name` (callers branch on it, across processes
 * too), the ids that say what failed as readonly fields, and an optional
 * `cause`. Constructors only record what they are given (no I/O), so an error
 * can be built anywhere, including while a socket or file is failing.
 */

/** The ids of an error as plain data: what `ids()` returns and the wire form carries. */
export type ErrorIds = Readonly<Record<string, string | number | undefined>>;

/** The options every hearth error accepts: what caused it, if anything. */
export interface ErrorOptions {
  /** The error (or value) this one was raised because of; it travels on the wire one or more levels deep. */
  cause?: unknown;
}

/** Base class of every error hearth raises on purpose. */
export class HearthError extends Error {
  override name = "HearthError";
  readonly #ids: ErrorIds;

  /**
   * `ids` are the error's id fields: each becomes a property of the error
   * (subclasses `declare` them with their types) and `ids()` returns them.
   */
  constructor(message: string, options?: ErrorOptions, ids: ErrorIds = {}) {
    // An explicit `cause: undefined` would still make an own `cause` property; leave it off instead.
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.#ids = ids;
    Object.assign(this, ids);
  }

  /**
   * The ids that identify what failed (service, executor, call, key…), as
   * plain data: the wire form (sdk/wire/errors.ts) sends exactly these, so a
   * driver rebuilds the error with the same ids the head raised it with.
   * Subclasses whose ids are not plain fields (RemoteError's origin) override it.
   */
  ids(): ErrorIds {
    return this.#ids;
  }
}
