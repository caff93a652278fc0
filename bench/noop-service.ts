/** The service `bench rpc` calls: an empty method. */
export class Noop {
  ping(): null {
    return null;
  }
}
