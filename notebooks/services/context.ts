/**
 * The slice of hearth's ExecutorContext the tour's service reads, declared
 * structurally so the service needs nothing but node built-ins (the
 * executors load it through tsx from the notebook's folder).
 */

/** The part of hearth's object cache client this service uses. */
export interface TourObjects {
  get<T>(ref: { key: string } | string): Promise<T>;
  heldVersion(ref: { key: string } | string): number | undefined;
}

/** The part of hearth's ExecutorContext this service reads (structurally compatible). */
export interface TourContext {
  executorId: string;
  rank: number | null;
  worldSize: number | null;
  objects: TourObjects;
}
