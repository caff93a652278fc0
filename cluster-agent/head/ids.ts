/**
 * Id counters of the head (services, executors, calls). With a data dir a
 * restarted head must not hand out an id the previous instance used: a warm
 * executor it adopts may still send the result of an old call, and that
 * result must never match a new call. So each counter carries a ceiling that
 * was persisted before any id at or above it is handed out (persist.ts), and
 * a restarted head starts at the persisted ceiling.
 */

/** Hands out increasing integer ids; asks to move its ceiling up before passing it. */
export class IdCounter {
  /** The next id to hand out. */
  next = 1;
  /** The first id not yet covered by the persisted state; Infinity without a data dir. */
  ceiling = Infinity;
  /** Called before an id at or above the ceiling is handed out: must raise (and persist) the ceiling. */
  onCeiling: () => void = () => {};

  /** The next id. */
  take(): number {
    if (this.next >= this.ceiling) this.onCeiling();
    return this.next++;
  }
}
