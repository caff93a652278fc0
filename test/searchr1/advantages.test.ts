import assert from "node:assert/strict";
import { test } from "node:test";
import { AdvantageError, DEFAULT_ADVANTAGE_EPS, flattenGroups, groupAdvantages } from "../../sdk/rl/scoring/advantages.js";

function near(actual: number[], expected: number[]): void {
  assert.equal(actual.length, expected.length);
  actual.forEach((a, i) => assert.ok(Math.abs(a - expected[i]!) < 1e-12, `[${i}] ${a} != ${expected[i]}`));
}

test("advantages are (r − mean) / (population std + 1e-6) per group", () => {
  const out = groupAdvantages([
    [1, 0, 0, 1],
    [1, 0, 0, 0],
  ]);
  assert.deepEqual(out.kept, [0, 1]);
  assert.equal(out.dropped, 0);
  // Group 0: mean 0.5, population std 0.5.
  near(out.advantages[0]!, [0.5, -0.5, -0.5, 0.5].map((x) => x / (0.5 + 1e-6)));
  // Group 1: mean 0.25, population std sqrt(3)/4 (the sample std would be 0.5).
  const std = Math.sqrt(3) / 4;
  near(out.advantages[1]!, [0.75, -0.25, -0.25, -0.25].map((x) => x / (std + DEFAULT_ADVANTAGE_EPS)));
  near(out.means, [0.5, 0.25]);
  near(out.stds, [0.5, std]);
  assert.ok(Math.abs(out.advantages[1]![0]! - 1.7320468) < 1e-6);
});

test("eps is configurable and advantages of a group sum to zero", () => {
  const out = groupAdvantages([[0.2, 0.9, 0.4]], { eps: 0 });
  assert.ok(Math.abs(out.advantages[0]!.reduce((s, a) => s + a, 0)) < 1e-12);
  const sq = out.advantages[0]!.reduce((s, a) => s + a * a, 0) / 3;
  assert.ok(Math.abs(sq - 1) < 1e-12, "eps = 0: unit population variance");
  assert.throws(() => groupAdvantages([[1, 0]], { eps: -1 }), AdvantageError);
});

test("groups whose rewards are all equal are dropped and counted", () => {
  const out = groupAdvantages([[1, 1, 1], [0, 1], [0, 0, 0, 0], [0.5], [0, 0, 1]]);
  assert.deepEqual(out.kept, [1, 4]);
  assert.equal(out.dropped, 3);
  assert.equal(out.advantages.length, 2);
  near(out.advantages[0]!, [-0.5 / (0.5 + 1e-6), 0.5 / (0.5 + 1e-6)]);
  assert.deepEqual(flattenGroups(out.advantages).length, 5);
  assert.deepEqual(groupAdvantages([]), { advantages: [], kept: [], dropped: 0, means: [], stds: [] });
});

test("NaN, infinite and non-number rewards are rejected naming the sample", () => {
  assert.throws(
    () => groupAdvantages([[1, 0], [0, NaN, 1]]),
    (err: unknown) => err instanceof AdvantageError && err.group === 1 && err.sample === 1 && /sample 1 in group 1 is NaN/.test(err.message),
  );
  assert.throws(() => groupAdvantages([[Infinity, 0]]), /sample 0 in group 0 is Infinity/);
  assert.throws(() => groupAdvantages([[0, "1" as unknown as number]]), AdvantageError);
  assert.throws(() => groupAdvantages([[1, 0], []]), /group 1 is empty/);
  assert.throws(() => groupAdvantages("x" as unknown as number[][]), AdvantageError);
});

test("flattenGroups keeps group order", () => {
  assert.deepEqual(flattenGroups([[1, 2], [], [3]]), [1, 2, 3]);
});
