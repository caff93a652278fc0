/**
 * `hearth replay` on a run that lives on the cluster (real processes): a
 * detached run steps, is paused, and a sample is replayed from the terminal:
 * exactly (the header says so), with `--json` listing every token the
 * notebook view of the same replay (an attached handle's) draws, with the
 * same kind, text and probability; and flag errors are clear.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { JUPYTER_DISPLAY } from "../../sdk/notebook/index.js";
import { AttachedRun } from "../../sdk/rl/notebook/attached.js";
import type { ReplayJSON } from "../../sdk/rl/replay/episode.js";
import { CLI, startCluster, waitFor, type TestCluster } from "../helpers/cluster.js";

const exec = promisify(execFile);
const work = mkdtempSync(path.join(os.tmpdir(), "hearth-replay-cli-"));
const NAME = "replayed";
let cluster: TestCluster;

before(async () => {
  process.env.HEARTH_HOME = path.join(work, "home");
  cluster = await startCluster({ agents: [{ id: "n1", cpus: 3, mem: "8g" }] });
});
after(async () => {
  await exec(process.execPath, [CLI, "stop", NAME, "--head", cluster.endpoint, "--timeout", "2m"]).catch(() => undefined);
  await cluster?.stop();
  rmSync(work, { recursive: true, force: true });
});

const hearth = async (...args: string[]): Promise<string> => (await exec(process.execPath, [CLI, ...args, "--head", cluster.endpoint], { timeout: 120_000 })).stdout;

/** The tokens an episode's HTML view draws: position, kind, text and (generated) probability. */
function drawn(html: string): Array<{ i: number; kind: string; text: string; p?: string }> {
  const unescape = (t: string): string => t.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, "&");
  return [...html.matchAll(/<span class="hearth-tok hearth-(\w+)" data-i="(\d+)"(?: data-p="([\d.]+)")?[^>]*>([^<]*)<\/span>/g)].map((m) => ({ i: Number(m[2]), kind: m[1]!, text: unescape(m[4]!), ...(m[3] !== undefined ? { p: m[3] } : {}) }));
}

test("hearth replay: exact from the terminal, and its --json lists what the notebook view draws", async () => {
  await hearth("train", "search-r1", "--name", NAME, "--steps", "50", "--prompts-per-step", "2", "--prompts-per-task", "2", "--group-size", "2", "--eval-size", "4", "--eval-every", "0", "--detach");
  const run = await AttachedRun.open(NAME, { head: cluster.endpoint });
  try {
    await waitFor("the run's second step", async () => ((await run.status()).step >= 2 ? true : undefined), 240_000);
    await run.pause();
    const out = await hearth("replay", NAME, "--step", "1", "--sample", "1", "--no-color");
    assert.match(out, /^replay of sample 1 of step 1 \(.*\), policy version 1: equal to the recording, token for token and logprob for logprob/m);
    assert.match(out, /the 5 least likely generated tokens:\n {2}token \d+ \(turn \d+\) .* p [01]\.\d+ entropy [\d.]+; alternatives /);
    const json = JSON.parse(await hearth("replay", NAME, "--step", "1", "--sample", "1", "--json", "--top-k", "3")) as ReplayJSON;
    assert.equal(json.matched, true);
    assert.ok(json.tokens.filter((t) => t.kind === "generated").every((t) => t.top?.length === 3 && typeof t.entropy === "number"));
    // The notebook view of the same replay draws exactly the JSON's tokens (the prompt folded, the same texts and probabilities).
    const view = await run.replay({ step: 1, sample: 1, topK: 3 });
    const html = view[JUPYTER_DISPLAY]()["text/html"] as string;
    const tokens = drawn(html);
    assert.equal(tokens.length, json.tokens.length, "every token, the prompt's included");
    for (const t of tokens) {
      const j = json.tokens[t.i]!;
      assert.equal(t.kind, j.kind, `token ${t.i}'s kind`);
      assert.equal(t.text, j.text, `token ${t.i}'s text`);
      if (j.kind === "generated") assert.equal(t.p, j.p!.toFixed(6), `token ${t.i}'s probability`);
    }
    await assert.rejects(hearth("replay", NAME, "--step", "1"), /hearth replay needs --sample K/);
    await assert.rejects(hearth("replay", NAME, "--step", "1", "--sample", "99"), /sample 99: step 1 has samples 0–3/);
    await assert.rejects(hearth("replay", NAME, "--step", "1", "--sample", "0", "--top-k", "50"), /--top-k must be at most 20/);
  } finally {
    await run.detach();
  }
});
