import assert from "node:assert/strict";
import { test } from "node:test";
import { everFitsGang, everFitsOne, give, placeMany, placeOne, take, type PlacementAgent } from "../../cluster-agent/head/placement.js";

function agent(id: string, cpu: number, gpus: number): PlacementAgent {
  const g = Array.from({ length: gpus }, (_, i) => String(i));
  return { id, free: { cpu, mem: 1e12, gpus: [...g] }, total: { cpu, mem: 1e12, gpus: [...g] } };
}

test("a gang is placed whole or not at all", () => {
  const agents = [agent("a", 8, 3)];
  const need = { cpu: 1, mem: 0, gpu: 1 };
  const first = placeMany(agents, need, 2)!;
  assert.equal(first.length, 2);
  for (const p of first) take(agents[0]!.free, need, p.gpus);
  assert.deepEqual(agents[0]!.free.gpus, ["2"]);
  assert.equal(placeMany(agents, need, 2), null, "one free GPU is not half a gang");
  assert.deepEqual(agents[0]!.free.gpus, ["2"], "a failed placement reserves nothing");
  for (const p of first) give(agents[0]!.free, need, p.gpus, agents[0]!.total);
  assert.deepEqual(agents[0]!.free.gpus, ["0", "1", "2"]);
});

test("members may span agents; the most free CPU wins for a single executor", () => {
  const agents = [agent("a", 2, 1), agent("b", 4, 1)];
  assert.equal(placeOne(agents, { cpu: 1, mem: 0, gpu: 0 })!.agentId, "b");
  const gang = placeMany(agents, { cpu: 1, mem: 0, gpu: 1 }, 2)!;
  assert.deepEqual(gang.map((p) => p.agentId).sort(), ["a", "b"]);
});

test("satisfiability ignores current load but not totals", () => {
  const agents = [agent("a", 4, 2)];
  agents[0]!.free.cpu = 0;
  assert.ok(everFitsOne(agents, { cpu: 4, mem: 0, gpu: 2 }));
  assert.ok(!everFitsOne(agents, { cpu: 5, mem: 0, gpu: 0 }));
  assert.ok(everFitsGang(agents, { cpu: 2, mem: 0, gpu: 1 }, 2));
  assert.ok(!everFitsGang(agents, { cpu: 2, mem: 0, gpu: 1 }, 3));
});
