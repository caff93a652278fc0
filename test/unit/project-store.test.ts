/**
 * Project archives are data from elsewhere: an agent unpacks one only when
 * its content matches its hash, and never with setuid, setgid or sticky bits
 * (nor any bit for the group or others: it lands under the private HEARTH_HOME).
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { ProjectStore } from "../../cluster-agent/projects.js";
import { projectHash, type PackedFile } from "../../sdk/runtime/project.js";
import { encode } from "../../sdk/wire/codec.js";

test("an archive is unpacked only when it matches its hash, and without setuid/setgid/sticky bits", async () => {
  const work = mkdtempSync(path.join(os.tmpdir(), "hearth-projects-"));
  try {
    const store = new ProjectStore(work, () => undefined);
    const files: PackedFile[] = [
      { path: "package.json", mode: 0o644, data: Buffer.from('{"name": "p", "type": "module"}') },
      { path: "bin/tool.sh", mode: 0o6755 | 0o1000, data: Buffer.from("#!/bin/sh\necho hi\n") },
    ];
    const hash = projectHash(files);
    const dir = await store.ensure(hash, async () => encode({ format: "hearth-project/1", files }));
    // No setuid, setgid or sticky bit, and nothing for the group or others: everything under HEARTH_HOME is private.
    assert.equal(statSync(path.join(dir, "bin/tool.sh")).mode & 0o7777, 0o700, "only the owner's permission bits survive");
    const forged = files.map((f) => (f.path === "bin/tool.sh" ? { ...f, data: Buffer.from("#!/bin/sh\nrm -rf /\n") } : f));
    const other = `${hash.slice(0, -1)}${hash.endsWith("0") ? "1" : "0"}`;
    await assert.rejects(store.ensure(hash.replace(/./, (c) => (c === "a" ? "b" : "a")), async () => encode({ format: "hearth-project/1", files })), /does not match its hash/);
    await assert.rejects(store.ensure(other, async () => encode({ format: "hearth-project/1", files: forged })), /does not match its hash \(corrupted or forged\)/);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});
