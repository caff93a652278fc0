/**
 * The head's distribution trees (cluster-agent/head/distribution-tree.ts),
 * in one process: a base reaches n nodes from the head once, through a
 * tree of bounded fan-out (depth about log n, not n as a chain); a node
 * that asks again is never hung under its own subtree; a failed parent
 * leaves the tree and its orphans take no new children until they ask again;
 * a new base starts a new tree, patches do not.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { DistributionTrees, HEAD } from "../../cluster-agent/head/distribution-tree.js";

const live = (): boolean => true;

test("100 nodes: the head feeds one, every node at most fan-out others, depth about log2(100)", () => {
  const t = new DistributionTrees(2);
  const parents = new Map<string, string>();
  for (let i = 0; i < 100; i++) parents.set(`n${i}`, t.assign("app/w", 1, `n${i}`, live));
  assert.equal([...parents.values()].filter((p) => p === HEAD).length, 1, "the head sends the base once");
  const fed = new Map<string, number>();
  for (const p of parents.values()) fed.set(p, (fed.get(p) ?? 0) + 1);
  for (const [p, n] of fed) if (p !== HEAD) assert.ok(n <= 2, `${p} feeds ${n} nodes`);
  const depth = Math.max(...[...parents.keys()].map((n) => t.depth("app/w", n)!));
  assert.ok(depth <= 7, `depth ${depth}: a tree, not a chain of 100`);
});

test("a node that holds the base (patches only) feeds the next node, across patches; a new base starts afresh", () => {
  const t = new DistributionTrees(2);
  t.holds("app/w", 1, "a");
  assert.equal(t.assign("app/w", 1, "b", live), "a", "the late joiner copies the base from its holder");
  assert.equal(t.assign("app/w", 2, "c", live), HEAD, "a new base: nobody holds it yet");
});

test("a failed parent leaves the tree: its children are re-parented outside their own subtrees, never under an orphan", () => {
  const t = new DistributionTrees(1);
  assert.equal(t.assign("k", 1, "a", live), HEAD);
  assert.equal(t.assign("k", 1, "b", live), "a");
  assert.equal(t.assign("k", 1, "c", live), "b");
  assert.equal(t.assign("k", 1, "d", live), "c");
  // b fails c: b leaves; c (orphaned, with d below it) may not take d's place, nor go under d.
  const again = t.assign("k", 1, "c", live, "b");
  assert.notEqual(again, "d", "c is not hung under its own child");
  assert.notEqual(again, "b", "nor under the node that failed");
  assert.equal(again, "a", "b left a room: c takes its place, d still below c");
  assert.equal(t.depth("k", "d"), 3);
  // A node whose parent left is no source until it asks again.
  const t2 = new DistributionTrees(2);
  t2.assign("k", 1, "a", live);
  t2.assign("k", 1, "b", live);
  t2.assign("k", 1, "c", live);
  t2.drop("a");
  assert.equal(t2.assign("k", 1, "e", live), HEAD, "b and c lost their parent: e does not wait on them");
});

test("a node that is gone is no source", () => {
  const t = new DistributionTrees(2);
  t.assign("k", 1, "a", live);
  assert.equal(t.assign("k", 1, "b", (n) => n !== "a"), HEAD);
});
