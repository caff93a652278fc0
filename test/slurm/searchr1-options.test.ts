/**
 * The Slurm side of a Search-R1 run that needs no Slurm (pure): the engine
 * flags are parsed and checked before anything is submitted, a job's queue
 * wait comes from Slurm's own times, and the notebook's status view and
 * `hearth status` show the jobs.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { parseTrainFlags } from "../../sdk/rl/cli/train-cli.js";
import { layerOptions, validateOptions, type RunOptions } from "../../sdk/rl/run/options.js";
import { queueWaitMs } from "../../sdk/engines/slurm/commands.js";
import { statusView } from "../../sdk/notebook/status.js";
import { formatStatus } from "../../cluster-agent/format-status.js";
import type { AppStatus } from "../../sdk/runtime/app.js";

const out = mkdtempSync(path.join(os.tmpdir(), "hearth-sr1-opts-"));

function check(flags: string[]): RunOptions {
  const o = layerOptions({}, { ...parseTrainFlags(flags), out });
  validateOptions(o);
  return o;
}

test("--engine slurm flags become the run's options; repeated --sbatch-arg keeps every value", () => {
  const o = check(["--engine", "slurm", "--partition", "gpu", "--account", "ml-team", "--sbatch-arg=--time=08:00:00", "--sbatch-arg=--constraint=a100", "--bind", "tcp://10.1.0.5:0"]);
  assert.equal(o.engine, "slurm");
  assert.equal(o.partition, "gpu");
  assert.equal(o.account, "ml-team");
  assert.deepEqual(o.sbatchArgs, ["--time=08:00:00", "--constraint=a100"]);
  assert.equal(o.bind, "tcp://10.1.0.5:0");
  assert.equal(check([]).engine, "local", "the default engine is local");
});

test("bad engine flags are clear errors naming the flag", () => {
  const cases: Array<[string[], RegExp]> = [
    [["--engine", "k8s"], /--engine must be one of local, slurm; got k8s/],
    [["--account", "a"], /--account needs --engine slurm/],
    [["--sbatch-arg=--time=1:00:00"], /--sbatch-arg needs --engine slurm/],
    [["--bind", "tcp://10.0.0.1:0"], /--bind needs --engine slurm/],
    [["--engine", "slurm", "--partition", "gpu a"], /--partition must name Slurm partitions/],
    [["--engine", "slurm", "--account", "a,b"], /--account must name one Slurm account/],
    [["--engine", "slurm", "--sbatch-arg=time=1"], /each --sbatch-arg is one sbatch option/],
    [["--engine", "slurm", "--sbatch-arg=--partition=x"], /hearth sets --partition itself \(use --partition\)/],
    [["--engine", "slurm", "--sbatch-arg=-n4"], /hearth sets -n itself/],
    [["--engine", "slurm", "--sbatch-arg=--mem=4G"], /hearth sets --mem itself \(use mem= in --rollout-resreq/],
    [["--engine", "slurm", "--bind", "tcp://10.0.0.1"], /--bind must be tcp:\/\/ADDRESS:PORT/],
    [["--engine", "slurm", "--bind", "tcp://10.0.0.1:70000"], /--bind must be tcp:\/\/ADDRESS:PORT/],
    [["--engine", "slurm", "--bind", "tcp://10.0.0.1:0", "--head", "tcp://10.0.0.1:5555"], /give one of them/],
  ];
  for (const [flags, want] of cases) assert.throws(() => check(flags), want, flags.join(" "));
  // node's parser refuses a dash-led value given apart from its flag, and says how to write it.
  assert.throws(() => parseTrainFlags(["--sbatch-arg", "--time=1:00:00"]), /--sbatch-arg=-/);
});

test("a job's queue wait is Slurm's submit-to-start, or submit-to-now while pending", () => {
  assert.equal(queueWaitMs({ state: "RUNNING", submittedAt: 1000, startedAt: 3500 }), 2500);
  assert.equal(queueWaitMs({ state: "PENDING", submittedAt: 1000, startedAt: null }, 9000), 8000);
  assert.equal(queueWaitMs({ state: "RUNNING", submittedAt: null, startedAt: 5 }), null);
});

test("the notebook's status view and `hearth status` list the Slurm jobs: ids, states, nodes, waits", () => {
  const jobs = [
    { id: "41", serviceId: "s1", service: "rollout", tasks: 1, state: "RUNNING", where: "n1", submittedAt: 0, startLatencyMs: 1200, waitedMs: 300, agents: ["a1"] },
    { id: "42", serviceId: "s2", service: "trainer", tasks: 2, state: "PENDING", where: "Resources", submittedAt: 0, startLatencyMs: null, waitedMs: 4100, agents: [] },
  ];
  const status = {
    head: { id: "h", endpoint: "tcp://10.0.0.1:5555", pid: 1, uptimeMs: 3000 },
    agents: [],
    apps: [{ name: "search-r1", drivers: 1, keepAliveMs: 1_800_000, releaseAt: null, services: [] }],
    slurm: { jobs, lastError: null },
  } as unknown as AppStatus;
  const text = statusView(status).text();
  assert.match(text, /slurm job\s+\|?\s*service/);
  assert.match(text, /41\s+\|?\s*rollout\s+\|?\s*1\s+\|?\s*RUNNING\s+\|?\s*n1\s+\|?\s*0\.3\s+\|?\s*1\.2/);
  assert.match(text, /42\s+\|?\s*trainer\s+\|?\s*2\s+\|?\s*PENDING\s+\|?\s*Resources\s+\|?\s*4\.1/);
  const cli = formatStatus({ ...status, objects: undefined });
  assert.match(cli, /slurm jobs: 2/);
  assert.match(cli, /job 41 RUNNING\s+rollout, 1 task\(s\) on n1, waited 0\.3 s, agent up 1\.2 s after sbatch/);
  assert.match(cli, /job 42 PENDING\s+trainer, 2 task\(s\) waiting \(Resources\), waited 4\.1 s so far/);
});
