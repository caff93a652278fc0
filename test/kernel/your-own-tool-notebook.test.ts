// Runs notebooks/03-your-own-tool.ipynb with Debian's nbclient through the
// hearth kernel against a head and agent of its own: a tool module written by
// the notebook, a run of the calculator's recipe with it (from the shipped
// policy), a step with the buggy tool, a trajectory whose tool results are
// masked, the tool fixed and reloaded on the warm executors, a step and a few
// more, and the curves. Checked from the executed outputs: properties, never
// exact numbers (kept groups, a sample that called the tool and answered
// right, the reload kept the policy: no weights fetched again).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { cardMetrics } from "./nbclient.js";
import { useNotebookRig } from "./notebook-rig.js";

const PLOTLY = "application/vnd.plotly.v1+json";
const rig = useNotebookRig("tool-nb-agent", "hearth-nb03-home-");

test("03-your-own-tool.ipynb: a tool of one's own, a step, its masked results, the tool fixed and reloaded warm, training and curves", { timeout: 600_000 }, async () => {
  await rig.ready();
  const result = await rig.runRepo("03-your-own-tool.ipynb");
  const { html, text } = result;

  // The module the notebook wrote is the tool the executors ran: its fixed version is on disk.
  const tool = readFileSync(path.join(rig.home, "my-tool", "my-calc.mjs"), "utf8");
  assert.match(tool, /const result = \(v\) => v;/, "the fixed tool");

  const buggy = cardMetrics(html("const buggy")[0]!);
  const fixed = cardMetrics(html('writeTool("v")')[0]!);
  assert.ok(fixed.groups_kept > 0, `the step after the fix keeps groups (${fixed.groups_kept})`);
  assert.ok(fixed.calls_per_sample >= 1, `the policy calls the tool (${fixed.calls_per_sample} per sample)`);
  assert.ok(fixed.reward_mean > buggy.reward_mean, `the fixed tool earns more reward than the buggy one (${buggy.reward_mean} → ${fixed.reward_mean})`);
  assert.equal(fixed.sync_bytes, 0, "after the reload no rollout fetched weights again (and the step before published none it had not applied)");

  // A trajectory that called the tool and answered right, its results masked.
  const right = text('const right = fixed.samples');
  assert.match(right, /^trajectory \d+ of step 2: reward 1, .*, [1-9]\d* calculations?, finish answer/m, "a sample that called the tool and answered right");
  assert.match(right, /\[observation \d+-\d+\] <result> \d+ <\/result>/, "the tool's results are observation spans (masked)");
  assert.match(right, /results \(masked\) [1-9]/, "named in the environment's words");
  const buggyTrajectory = text("const called = buggy");
  assert.match(buggyTrajectory, /\[observation \d+-\d+\] <result> \d*0 <\/result>/, "the buggy tool's results were rounded to tens");

  // Training went on, and the curves are figures.
  const figures = result.rich.filter((r) => r.mime.includes(PLOTLY)).map((f) => /^Figure "([^"]*)"/.exec(f.text)?.[1]);
  assert.deepEqual(figures, ["mean reward", "calls per sample"]);
  assert.match(text("await run.close()"), /closed after 10 steps \(environment revision 1\)/);
});
