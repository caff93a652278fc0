// Runs notebooks/04-your-own-agent.ipynb with Debian's nbclient through the
// hearth kernel against a head and agent of its own: a calculator agent
// written with the Vercel AI SDK in the notebook, tried once against the
// executors' endpoint, a step of the agent calculator task from the shipped
// tiny-agent-calc policy, a trajectory shown as the agent's messages (tool
// calls, masked tool results) above its tokens, more training and the
// curves. Checked from the executed outputs: properties, never exact numbers.
import assert from "node:assert/strict";
import { test } from "node:test";
import { cardMetrics } from "./nbclient.js";
import { useNotebookRig } from "./notebook-rig.js";

const PLOTLY = "application/vnd.plotly.v1+json";
const rig = useNotebookRig("agent-nb-agent", "hearth-nb04-home-");

test("04-your-own-agent.ipynb: a Vercel AI SDK agent tried, trained unchanged, a trajectory as messages with masked tool results, and curves", { timeout: 600_000 }, async () => {
  await rig.ready();
  const result = await rig.runRepo("04-your-own-agent.ipynb");
  const { text, html } = result;

  // The agent, run once in the kernel against the run's endpoint, answered with a number.
  // The tiny policy begins an answer with a line break (exact match trims it; the cell shows it JSON-escaped, inspected).
  assert.match(text("const home ="), /→ "(?:\\{1,2}n)?-?\d+" \(gold -?\d+\)/, "the agent's one try answered a number");

  // The step: the agent path's alarms are in the card, every group of the step counted.
  const first = cardMetrics(html("const before")[0]!);
  for (const k of ["tool_parse_failures", "prefix_mismatches", "refused_requests", "sessions_without_calls", "zero_variance_share"]) assert.ok(k in first, `the step card counts ${k}`);
  assert.ok(first.calls_per_sample >= 1, `the agent called the tool (${first.calls_per_sample} per sample)`);
  // (Whether this first step keeps a group is the seed's luck: from a start that answers after one call, a group often agrees.)
  assert.equal(first.groups_kept + first.groups_dropped, 16, "the card counts every group of the step");
  assert.equal(first.prefix_mismatches, 0, "Qwen2.5's template extends the sampled tokens: no episode split");

  // A trajectory as the agent saw it: a trained reply with a tool call, a masked tool result, then the tokens.
  const trajectory = text("const called =");
  assert.match(trajectory, /^\[user · masked\] /m);
  assert.match(trajectory, /^\[assistant · sampled · trained\].*\n {2}→ calc\(\{"expression":"[^"]+"\}\)/m, "a sampled reply with its calc call");
  assert.match(trajectory, /^\[tool · tool result · masked\] -?\d+/m, "the tool's result, masked");
  assert.match(html("const called =").join("\n"), /the conversation<\/b>/);

  // Training went on: reward and calls curves, and held-out EM measured before and after.
  const figures = result.rich.filter((r) => r.mime.includes(PLOTLY)).map((f) => /^Figure "([^"]*)"/.exec(f.text)?.[1]);
  assert.deepEqual(figures, ["mean reward", "calls per sample"]);
  const summary = text("await run.train(");
  const m = /held-out EM (\d+\.\d)% → (\d+\.\d)%, calls per problem (\d\.\d\d) → (\d\.\d\d)/.exec(summary);
  assert.ok(m, `the before/after line (${summary})`);
  assert.ok(Number(m[2]) > Number(m[1]), `held-out EM went up (${m[1]}% → ${m[2]}%)`);
  assert.match(text("await run.close()"), /closed after 15 steps/);
});
