/**
 * What hearth asks Slurm for (pure: no Slurm needed), and the placement rule
 * that keeps a job's agents for its own service.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { buildAgentJob } from "../../sdk/engines/slurm/commands.js";
import { agentAccepts } from "../../cluster-agent/head/placement.js";

const base = {
  name: "hearth.rl",
  comment: "hearth:H:s3",
  defaultMem: 512 * 1024 ** 2,
  agentCommand: ["/usr/bin/node", "/opt/hearth/dist/cluster-agent/cli.js"],
  agentArgs: ["--head", "tcp://10.0.0.5:4000", "--label", "hearth.service=s3"],
  output: "/home/u/.hearth/slurm/%j.out",
};

test("a gang job: N tasks, per-task CPUs, memory per CPU and GPUs per task; one agent per task", () => {
  const { args, script } = buildAgentJob({ ...base, tasks: 2, resources: { cpu: 4, mem: 16 * 1024 ** 3, gpu: 1 }, partition: "gpu", account: "ml", extraArgs: ["--time=01:00:00"] });
  assert.deepEqual(args, [
    "--parsable", "--job-name=hearth.rl", "--comment=hearth:H:s3", "--ntasks=2", "--cpus-per-task=4", "--mem-per-cpu=4096M",
    "--output=/home/u/.hearth/slurm/%j.out", "--gpus-per-task=1", "--partition=gpu", "--account=ml", "--time=01:00:00",
  ]);
  assert.match(script, /^#!\/bin\/bash\n/);
  assert.match(script, /exec srun --kill-on-bad-exit=0 --ntasks=2 --cpus-per-task=4 --gpus-per-task=1 \/bin\/bash -c '.*SLURM_PROCID.*' \/usr\/bin\/node \/opt\/hearth\/dist\/cluster-agent\/cli.js agent --head tcp:\/\/10.0.0.5:4000 --label hearth.service=s3 --cpus 4 --mem 17179869184\n/);
  assert.doesNotMatch(script, /--gpus 0/, "GPUs come from Slurm's CUDA_VISIBLE_DEVICES");
});

test("a pool job without GPUs tells the agent it has none, and defaults its memory", () => {
  const { args, script } = buildAgentJob({ ...base, tasks: 1, resources: { cpu: 0.5, mem: 0, gpu: 0 } });
  assert.ok(args.includes("--cpus-per-task=1"));
  assert.ok(args.includes("--mem-per-cpu=512M"));
  assert.ok(!args.some((a) => a.startsWith("--gpus")));
  assert.match(script, /--cpus 1 --mem 536870912 --gpus 0\n/);
});

test("agents labelled for a service host only that service; elastic services only run on their own agents", () => {
  const s3 = { id: "s3", elastic: true };
  const plain = { id: "s4", elastic: false };
  assert.equal(agentAccepts({ "hearth.service": "s3", "hearth.job": "17" }, s3), true);
  assert.equal(agentAccepts({ "hearth.service": "s9" }, s3), false);
  assert.equal(agentAccepts({}, s3), false);
  assert.equal(agentAccepts({}, plain), true);
  assert.equal(agentAccepts({ "hearth.service": "s3" }, plain), false);
});
