/**
 * An environment written outside the SDK (test/fixtures/echo-env.ts) on real
 * rollout executors, through the generic run: each executor builds its state
 * once; the observations it returns are the inserted text, masked out of the
 * loss; a tool that throws and one that never answers fail their sample
 * (finish "error", the EnvironmentError's text, reward 0, not trained on, the
 * step's env_errors) while the run goes on. And loadEnvironment's errors.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { loadEnvironment } from "../../sdk/rl/environment.js";
import { EnvironmentError } from "../../sdk/rl/errors.js";
import { AgentRun } from "../../sdk/rl/run/run.js";
import type { ScoredSample } from "../../sdk/rl/types.js";
import { echo, echoItems, echoRecipe, heard } from "../fixtures/echo-env.js";
import type { EnvironmentPackage } from "../../sdk/rl/run/recipe.js";
import { startCluster, type TestCluster } from "../helpers/cluster.js";

let cluster: TestCluster;

before(async () => {
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
});

after(async () => {
  await cluster?.stop();
});

/** The inserted spans of a sample (mask 0 after the prompt), decoded, in order. */
function insertedSpans(s: ScoredSample, decode: (ids: number[]) => string): string[] {
  const spans: string[] = [];
  let cur: number[] = [];
  for (let k = s.promptLength; k < s.tokens.length; k++) {
    if (s.mask[k] === 0) cur.push(s.tokens[k]!);
    else if (cur.length > 0) {
      spans.push(decode(cur));
      cur = [];
    }
  }
  if (cur.length > 0) spans.push(decode(cur));
  return spans;
}

test("an environment of one's own on real executors: init once per executor, observations masked, a throwing tool and a hanging one fail their sample, not the run", { timeout: 300_000 }, async () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "hearth-echo-"));
  const run = await AgentRun.create(
    { head: cluster.endpoint, name: "echo-env", out, rollouts: 2, trainers: 2, promptsPerStep: 4, promptsPerTask: 2, groupSize: 4, evalSize: 4, evalEvery: 0, maxTurnTokens: 12, maxResponseTokens: 80, maxToolCalls: 3, toolTimeoutMs: 1500, temperature: 1, seed: 3, log: () => undefined },
    echo,
  );
  try {
    const decode = (ids: number[]) => run.task.tokenizer.decode(ids);
    // Tools that answer: every inserted span is the observation of that call, in order, and nothing else is masked.
    const shout = await run.score(await run.rollout(echoItems("shout", 4), { step: 1 }));
    const called = shout.samples.filter((s) => s.calls.length > 0);
    assert.ok(called.length >= 2, `a random policy on this vocabulary calls the tool (${called.length} of ${shout.samples.length} samples did)`);
    for (const s of shout.samples) {
      assert.notEqual(s.finish, "error", s.error);
      const spans = insertedSpans(s, decode);
      // A call's observation, or " many " once the limit is reached (no call recorded then).
      assert.deepEqual(spans.slice(0, s.calls.length).map((x) => x.trim()), s.calls.map((_, n) => heard(n + 1).trim()), `sample ${s.itemId}#${s.tokens.length}: the inserted text is the environment's observations`);
      assert.ok(spans.slice(s.calls.length).every((x) => x.trim() === "many"), `past the limit only the limit's notice is inserted: ${JSON.stringify(spans)}`);
      assert.ok(s.calls.length <= 3, "the layer's tool-call limit holds");
      for (let k = s.promptLength; k < s.tokens.length; k++) if (s.mask[k] === 1) assert.ok(s.logprobs[k]! < 0, "a generated token carries its sampler logprob");
    }

    // A tool that throws (on a sample's second call) and one that never answers: those samples fail with the environment's error; the call returns.
    const t0 = performance.now();
    const bad = await run.score(await run.rollout([...echoItems("throw", 2), ...echoItems("hang", 2)], { step: 2 }));
    const seconds = (performance.now() - t0) / 1000;
    const thrown = bad.samples.filter((s) => s.itemId.startsWith("throw-") && s.finish === "error");
    const hung = bad.samples.filter((s) => s.itemId.startsWith("hang-") && s.finish === "error");
    assert.ok(thrown.length > 0 && hung.length > 0, `some samples of each failed (${thrown.length} thrown, ${hung.length} hung)`);
    for (const s of thrown) assert.match(s.error ?? "", /environment 'echo' failed on sample throw-\d#\d .*the tool exploded on its second call/);
    for (const s of hung) assert.match(s.error ?? "", /environment 'echo' did not answer the turn of sample hang-\d#\d \(stopped at <\/shout>\) within 1500 ms/);
    for (const s of bad.samples) {
      if (s.itemId.startsWith("throw-")) assert.ok(s.finish === "error" || s.calls.length < 2, "a throw sample either failed or never made its second call");
      if (s.itemId.startsWith("hang-")) assert.ok(s.finish === "error" || s.calls.length === 0, "a hang sample that called the tool failed");
    }
    for (const s of [...thrown, ...hung]) assert.deepEqual([s.reward, s.kept, s.advantage], [0, false, 0], "a failed sample scores 0 and is not trained on");
    assert.ok(seconds < 60, `the hanging tool cost its timeout, not forever (${seconds.toFixed(1)} s)`);

    // The built-in step on the training items (all "throw"): it completes, counts the failures, and trains on the rest only.
    const r = await run.step();
    const failed = r.samples.filter((s) => s.finish === "error");
    assert.ok(failed.length > 0, "the step's items made failing calls");
    assert.equal(r.metrics.env_errors, failed.length, "env_errors counts the failed samples");
    assert.ok(r.samples.filter((s) => s.kept).every((s) => s.finish !== "error"), "no failed sample is trained on");
    assert.equal(typeof r.metrics.shouts_per_sample, "number", "the calls metric is named by the environment");
    assert.equal(r.metrics.shouts_per_sample, r.samples.reduce((n, s) => n + s.calls.length, 0) / r.samples.length);
    const line = JSON.parse(readFileSync(path.join(out, "metrics.jsonl"), "utf8").trim().split("\n").at(-1)!) as Record<string, unknown>;
    assert.equal(line.env_errors, failed.length, "and metrics.jsonl says so");

    // Every rollout executor built its environment exactly once, for all of the above and an evaluation.
    await run.evaluate();
    const members = (await run.rolloutPool.members()).map((m) => m.executorId).sort();
    assert.equal(members.length, 2);
    const status = await cluster.status({ keys: 1000 });
    const keys: string[] = status.apps.find((x: { name: string }) => x.name === "echo-env")?.objects.keys ?? [];
    const inits = keys.filter((k) => k.startsWith("echo-inits/echo-env/")).map((k) => k.split("/")[2]!).sort();
    assert.deepEqual(inits, members, "one init per executor");
  } finally {
    await run.close();
  }
});

test("reloadEnvironment: an edited tool module takes effect at the next rollout; the engines keep the policy and its weights", { timeout: 300_000 }, async () => {
  // A tool module of one's own, where the executors' user can read it, and a package that uses it.
  const dir = mkdtempSync(path.join(os.tmpdir(), "hearth-tool-"));
  chmodSync(dir, 0o755);
  const file = path.join(dir, "tool.mjs");
  const write = (word: string) => {
    writeFileSync(file, `export class Tool {
  name = "tool"; stops = ["</shout>", "</answer>"];
  reset(item) { return { system: "shout", user: item.question, state: null }; }
  step(_s, turn) { return turn.stop === "</answer>" ? { done: true } : { observation: " heard ${word} ", call: "x" }; }
}
`);
    chmodSync(file, 0o644);
  };
  write("one");
  const pkg: EnvironmentPackage = {
    ...echo,
    recipeFor: () => ({ ...echoRecipe, prepare: async (o) => { const t = await echoRecipe.prepare(o); return { ...t, environment: { ...t.environment, spec: { module: file, export: "Tool" } } }; } }),
  };
  const run = await AgentRun.create({ head: cluster.endpoint, name: "tool-reload", out: mkdtempSync(path.join(os.tmpdir(), "hearth-reload-")), rollouts: 2, trainers: 2, promptsPerTask: 2, groupSize: 4, evalSize: 2, evalEvery: 0, maxTurnTokens: 12, maxResponseTokens: 60, seed: 5, log: () => undefined }, pkg);
  try {
    const decode = (ids: number[]) => run.task.tokenizer.decode(ids);
    const observed = (samples: ScoredSample[]) => [...new Set(samples.flatMap((x) => insertedSpans(x, decode).map((t) => t.trim())))];
    const before = await run.rollout(echoItems("shout", 4), { step: 1 });
    assert.ok(before.parts.some((p) => p.r.syncBytes > 0), "the first rollouts fetched the policy");
    assert.deepEqual(observed((await run.score(before)).samples), ["heard one"]);
    await run.syncRollouts(); // every executor holds the policy now
    const policy = (await run.digests()).rollouts.map((r) => [r.executorId, r.digest, r.version]);
    assert.ok(policy.every(([, d]) => d !== null) && policy.length === 2);
    write("two");
    assert.deepEqual(await run.reloadEnvironment(), { revision: 1 });
    // Every executor (each addressed) takes the new setup: the environment is loaded again, the weights are not fetched again.
    const synced = await run.syncRollouts();
    assert.deepEqual(synced.map((x) => x.bytes), [0, 0], "no executor fetched weights again: the engine kept them");
    const after = await run.rollout(echoItems("shout", 4), { step: 1 });
    assert.deepEqual(after.parts.map((p) => p.r.syncBytes), after.parts.map(() => 0));
    assert.deepEqual(observed((await run.score(after)).samples), ["heard two"], "the edited tool answered");
    assert.deepEqual((await run.digests()).rollouts.map((r) => [r.executorId, r.digest, r.version]), policy, "every executor's policy is the one it held");
  } finally {
    await run.close();
  }
});

test("an environment module that is not one is a clear error naming the module and what is missing", async () => {
  const mod = { Thing: class {}, NoStops: class { name = "x"; stops = []; reset() {} step() {} }, notAClass: 3 };
  const load = (exp: string) => loadEnvironment({ module: "/my/env.js", export: exp }, async () => mod);
  await assert.rejects(load("Missing"), (e: Error) => e instanceof EnvironmentError && /\/my\/env\.js has no export 'Missing' that is a class \(it exports Thing, NoStops, notAClass\)/.test(e.message));
  await assert.rejects(load("notAClass"), EnvironmentError);
  await assert.rejects(load("Thing"), /\/my\/env\.js#Thing is not an environment: it lacks a name/);
  await assert.rejects(load("NoStops"), /it lacks stop strings/);
});
