import assert from "node:assert/strict";
import { test } from "node:test";
import { formatResources, parseMem, parseResreq } from "../../sdk/runtime/resreq.js";
import { ResreqError } from "../../sdk/errors/index.js";

test("parses cpu, mem with units and gpu", () => {
  assert.deepEqual(parseResreq("cpu=8,mem=64g,gpu=1"), { cpu: 8, mem: 64 * 1024 ** 3, gpu: 1 });
  assert.deepEqual(parseResreq(" cpu = 0.5 , mem=512M "), { cpu: 0.5, mem: 512 * 1024 ** 2, gpu: 0 });
  assert.deepEqual(parseResreq(""), { cpu: 1, mem: 0, gpu: 0 });
  assert.equal(parseMem("1.5GiB"), 1.5 * 1024 ** 3);
  assert.equal(parseMem("1048576"), 1048576);
});

test("rejects unknown keys, repeats, bad numbers and bad units with what to do", () => {
  const cases: Array<[string, RegExp]> = [
    ["cpus=8", /unknown resource 'cpus'.*known keys are cpu, mem, gpu/],
    ["cpu=8,cpu=2", /given twice/],
    ["cpu=-1", /bad value '-1' for cpu/],
    ["cpu=abc", /bad value 'abc'/],
    ["gpu=1.5", /whole number/],
    ["mem=64q", /bad memory size '64q'/],
    ["mem=", /bad memory size ''/],
    ["cpu", /expected key=value/],
  ];
  for (const [text, re] of cases) {
    assert.throws(() => parseResreq(text), (e: unknown) => e instanceof ResreqError && re.test(e.message), text);
  }
});

test("formats back to resreq syntax", () => {
  assert.equal(formatResources(parseResreq("cpu=8,mem=64g,gpu=1")), "cpu=8,mem=64g,gpu=1");
  assert.equal(formatResources(parseResreq("cpu=2")), "cpu=2");
});
