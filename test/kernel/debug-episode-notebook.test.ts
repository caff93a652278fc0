// Runs notebooks/05-debug-an-episode.ipynb with Debian's nbclient through the
// hearth kernel against a head and agent of its own: four calculator steps,
// a failed sample of step 1 replayed exactly, the decision token after the
// first result found with its alternatives, a branch that forces `<calc>`
// there, a branch with another tool result, and the episode compared at two
// policy versions. Checked from the executed outputs: properties, never exact
// numbers.
import assert from "node:assert/strict";
import { test } from "node:test";
import { useNotebookRig } from "./notebook-rig.js";

const rig = useNotebookRig("debug-nb-agent", "hearth-nb05-home-");

test("05-debug-an-episode.ipynb: a failed sample replayed exactly, its decision token, two what-if branches, two versions compared", { timeout: 600_000 }, async () => {
  await rig.ready();
  const result = await rig.runRepo("05-debug-an-episode.ipynb");
  const { text } = result;
  const html = (start: string) => result.html(start).join("\n");

  assert.match(text("const samples = run.result(1)"), /^'?sample \d+: .* \(gold \d+; answered \d+\)/m, "a sample that answered wrong");
  // The replay: checked equal, coloured by probability, the calculator's results inserted.
  const replay = text("const ep = await run.replay");
  assert.match(replay, /equal to the recording, token for token and logprob for logprob/);
  const view = html("const ep = await run.replay");
  assert.match(view, /class="hearth-replay"/);
  assert.ok((view.match(/class="hearth-tok hearth-generated"[^>]*data-p="/g) ?? []).length > 5, "generated tokens carry their probability");
  assert.match(view, /hearth-tok hearth-observation[^>]*>[^<]*&lt;result&gt;|hearth-observation[^>]*>\s*&lt;result/, "results are marked inserted");
  // The decision after the first result: answering, with calculating again among the alternatives.
  assert.match(text("const decision ="), /wrote " ?<answer>" with p 0\.\d+; alternatives .*"<calc>"/);
  // Forcing <calc> there: the branch diverges from the original at that token and makes another call.
  const forced = text("const again =");
  assert.match(forced, /^what if: force "<calc>" at token \d+ \(was " ?<answer>"\)/m);
  assert.match(forced, /^branch \(reward [01]/m);
  assert.match(forced, /branch.*\{ ?<calc>\}.*\[ <result>\]\[ \d+\]/s, "the forced <calc> led to another calculation and its result");
  // Another tool result: the policy copies it.
  assert.match(text("const other ="), /what if: the observation after turn 0 is " <result> 1234 <\/result> "/);
  assert.match(text("const other ="), /1234/);
  // Two versions: the later is surer of the episode's tokens, or at least sees it differently; kept versions and their cost shown.
  const cmp = text("const cmp =");
  assert.match(cmp, /step 1, sample \d+ under versions 1 and 5/);
  assert.match(cmp, /version 1: the recorded episode's generated tokens sum to logprob -?\d/);
  assert.match(cmp, /versions kept for replays: 1–\d+.* \(\d+\.\d MB\)/);
  assert.match(text("await run.close()"), /closed after 4 steps/);
});
