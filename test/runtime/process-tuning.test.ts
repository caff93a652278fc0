/**
 * hearth's own Node processes get glibc settings that keep 8 MiB object
 * chunks in the heap (process-tuning.ts); a tensor engine they start does
 * not, and a user's own settings are never replaced.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { DEFAULT_MALLOC_MMAP_THRESHOLD, DEFAULT_MALLOC_TRIM_THRESHOLD, TUNED_FOR_NODE_ENV, engineEnv, tunedEnv } from "../../sdk/runtime/process-tuning.js";

test("a hearth process gets the chunk settings; its engine is started without them, through every level of parent", () => {
  const head: NodeJS.ProcessEnv = { PATH: "/bin", ...tunedEnv({ PATH: "/bin" }) };
  assert.equal(head.MALLOC_MMAP_THRESHOLD_, DEFAULT_MALLOC_MMAP_THRESHOLD);
  assert.equal(head.MALLOC_TRIM_THRESHOLD_, DEFAULT_MALLOC_TRIM_THRESHOLD);
  assert.equal(head.MALLOC_ARENA_MAX, "2");
  // An executor started by an agent that was itself started with them: still hearth's, so still dropped for its engine.
  const executor: NodeJS.ProcessEnv = { ...head, ...tunedEnv(head) };
  assert.equal(executor[TUNED_FOR_NODE_ENV], "MALLOC_MMAP_THRESHOLD_,MALLOC_TRIM_THRESHOLD_");
  const engine = engineEnv(executor);
  assert.deepEqual(Object.keys(engine).sort(), ["MALLOC_ARENA_MAX", "PATH"]);
});

test("a user's own MALLOC settings are kept, for the process and for its engine", () => {
  const user: NodeJS.ProcessEnv = { MALLOC_TRIM_THRESHOLD_: "4096", MALLOC_ARENA_MAX: "8" };
  const p: NodeJS.ProcessEnv = { ...user, ...tunedEnv(user) };
  assert.deepEqual([p.MALLOC_TRIM_THRESHOLD_, p.MALLOC_ARENA_MAX, p.MALLOC_MMAP_THRESHOLD_], ["4096", "8", DEFAULT_MALLOC_MMAP_THRESHOLD]);
  const child: NodeJS.ProcessEnv = { ...p, ...tunedEnv(p) };
  assert.equal(child.MALLOC_TRIM_THRESHOLD_, "4096");
  const e = engineEnv(child);
  assert.equal(e.MALLOC_TRIM_THRESHOLD_, "4096", "the user's trim threshold reaches the engine");
  assert.equal(e.MALLOC_MMAP_THRESHOLD_, undefined, "hearth's mmap threshold does not");
});
