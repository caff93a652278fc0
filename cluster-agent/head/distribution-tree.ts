/**
 * Who copies a large object's base from whom: one tree per base, kept by
 * the head (object-service.ts asks it on every agent's get).
 *
 * The head sends a base once: the first node to need it copies it from the
 * head, every later one from a node that holds it or is receiving it (a node
 * serves chunks while it still receives them: pass-through). Nodes hang in a
 * tree of bounded fan-out (each node feeds at most `fanout` others, the head
 * one), so the last of 100 nodes waits on about log(100) hops, not 99 (a
 * chain). The tree belongs to the base, not to a version: after any number
 * of patches a late joiner, or a node that evicted its copy, copies the base
 * from a peer and only the patches from the head. A node that asks again is
 * moved (its subtree with it) under a new parent outside its own subtree, so
 * no copy ever waits on itself; a node reported failed, or gone, leaves the
 * tree and its children find new parents when they ask.
 */

/** The head, as a parent: it feeds at most one node of each base. */
export const HEAD = "@head";

/** The parent of a node whose parent left the tree (until it asks again). */
const ORPHAN = "@orphan";

/** Default fan-out of a node: how many others copy from it at once at most. */
export const DEFAULT_FANOUT = 2;

/** One base's tree. */
class BaseTree {
  /** Each node's parent (HEAD, another node, ORPHAN, or null: it held the base before the head knew, e.g. it got only patches). */
  readonly parent = new Map<string, string | null>();
  readonly children = new Map<string, Set<string>>();

  constructor(readonly baseVersion: number) {}

  private kids(of: string): Set<string> {
    let k = this.children.get(of);
    if (!k) this.children.set(of, (k = new Set()));
    return k;
  }

  /** Detaches `node` from its parent (its own children stay with it). */
  detach(node: string): void {
    const p = this.parent.get(node);
    if (p !== undefined && p !== null && p !== ORPHAN) this.children.get(p)?.delete(node);
    this.parent.delete(node);
  }

  attach(node: string, parent: string | null): void {
    this.detach(node);
    this.parent.set(node, parent);
    if (parent !== null) this.kids(parent).add(node);
  }

  /**
   * Removes `node`. Its children are orphans until they ask again (their
   * parent is gone: they will): no new node is hung under them or their
   * subtrees meanwhile, since what they still lack may never come.
   */
  remove(node: string): void {
    this.detach(node);
    for (const c of this.children.get(node) ?? []) this.parent.set(c, ORPHAN);
    this.children.delete(node);
  }

  /** `node` and everything below it. */
  subtree(node: string): Set<string> {
    const out = new Set<string>([node]);
    const queue = [node];
    while (queue.length > 0) {
      for (const c of this.children.get(queue.shift()!) ?? []) {
        if (out.has(c)) continue;
        out.add(c);
        queue.push(c);
      }
    }
    return out;
  }

  /** Depth of `node` (copies from the head: 1), or 0 for a node that held the base before. */
  depth(node: string): number {
    let d = 0;
    for (let p = this.parent.get(node); p !== undefined && p !== null && p !== ORPHAN; p = p === HEAD ? undefined : this.parent.get(p)) d++;
    return d;
  }

  /** Nodes by depth, shallowest first (holders that came with the base first): where a new node is hung. */
  breadthFirst(): string[] {
    const order: string[] = [];
    const seen = new Set<string>();
    const queue: string[] = [...[...this.parent].filter(([, p]) => p === null).map(([n]) => n), ...(this.children.get(HEAD) ?? [])];
    while (queue.length > 0) {
      const n = queue.shift()!;
      if (seen.has(n)) continue;
      seen.add(n);
      order.push(n);
      queue.push(...(this.children.get(n) ?? []));
    }
    return order;
  }
}

/** The trees of every large object's current base. */
export class DistributionTrees {
  private readonly trees = new Map<string, BaseTree>();

  constructor(private readonly fanout = DEFAULT_FANOUT) {}

  private tree(key: string, baseVersion: number): BaseTree {
    let t = this.trees.get(key);
    // A new base is a new tree: nobody holds it yet.
    if (!t || t.baseVersion !== baseVersion) this.trees.set(key, (t = new BaseTree(baseVersion)));
    return t;
  }

  /**
   * Node `agent` needs the base `baseVersion` of `key` whole: returns where
   * it copies from (HEAD, or another node), and records it there. `live`
   * says which nodes may serve (registered, reachable); `failed` names a
   * parent that just failed it (it leaves the tree).
   */
  assign(key: string, baseVersion: number, agent: string, live: (agent: string) => boolean, failed?: string): string {
    const t = this.tree(key, baseVersion);
    if (failed !== undefined && failed !== agent) t.remove(failed);
    // Never under itself: a node that asks again keeps its subtree, which it may not copy from.
    const own = t.subtree(agent);
    t.detach(agent);
    for (const n of t.breadthFirst()) {
      if (own.has(n) || !live(n)) continue;
      const busy = [...(t.children.get(n) ?? [])].filter((c) => live(c)).length;
      if (busy < this.fanout) {
        t.attach(agent, n);
        return n;
      }
    }
    // No live node has room (or none holds it): from the head, which feeds one node per base when it can.
    t.attach(agent, HEAD);
    return HEAD;
  }

  /** Node `agent` holds base `baseVersion` of `key` (it got patches on it, or was told it is current): it may feed others. */
  holds(key: string, baseVersion: number, agent: string): void {
    const t = this.tree(key, baseVersion);
    if (!t.parent.has(agent)) t.attach(agent, null);
  }

  /** Node `agent` is gone (or failed a copy): it leaves every tree. */
  drop(agent: string): void {
    for (const t of this.trees.values()) t.remove(agent);
  }

  /** Forgets the trees of keys starting with `prefix` (deleted objects). */
  forget(prefix: string): void {
    for (const k of [...this.trees.keys()]) if (k.startsWith(prefix)) this.trees.delete(k);
  }

  /** Depth of `agent` in `key`'s tree (1: from the head), or undefined. */
  depth(key: string, agent: string): number | undefined {
    const t = this.trees.get(key);
    return t?.parent.has(agent) ? t.depth(agent) : undefined;
  }

  /** `key`'s tree as parent by node (tests, status). */
  shape(key: string): Record<string, string | null> {
    return Object.fromEntries(this.trees.get(key)?.parent ?? []);
  }
}
