// TypeScript service modules without a build step: the executors' loader
// (tsx, through importServiceModule) with imports between .ts files, the
// type check with file and line, and the kernel failing a cell that names a
// broken service before any of the cell runs (so no executor starts).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { importServiceModule } from "../../cluster-agent/executor-host.js";
import { serviceModulesIn } from "../../kernel/service-precheck.js";
import { ServiceTypeError, checkServiceModule, typeCheckServiceModule } from "../../sdk/runtime/service-module.js";
import { JupyterBridge, outputsOf, TempKernelspec } from "./bridge.js";

let project: string;

/** A folder outside the checkout with a good service (three files) and a bad one (its helper has a type error on line 3). */
before(() => {
  project = mkdtempSync(path.join(tmpdir(), "hearth-ts-services-"));
  const services = path.join(project, "services");
  mkdirSync(services);
  writeFileSync(path.join(services, "scale.ts"), "export const factor: number = 3;\nexport function scale(x: number): number {\n  return factor * x;\n}\n");
  writeFileSync(path.join(services, "types.ts"), "export interface Answer {\n  value: number;\n  via: string;\n}\n");
  writeFileSync(
    path.join(services, "good.ts"),
    'import { scale } from "./scale.js";\nimport type { Answer } from "./types.js";\n\nexport class Good {\n  answer(x: number): Answer {\n    return { value: scale(x), via: "scale.ts" };\n  }\n}\n',
  );
  writeFileSync(path.join(services, "helper.ts"), "export function label(n: number): string {\n  const out: string = `#${n}`;\n  const wrong: number = out;\n  return String(wrong);\n}\n");
  writeFileSync(path.join(services, "bad.ts"), 'import { label } from "./helper.js";\n\nexport class Bad {\n  name(n: number): string {\n    return label(n);\n  }\n}\n');
});

after(() => {
  if (project) rmSync(project, { recursive: true, force: true });
});

test("executors load a TypeScript service with runtime imports between .ts files (tsx, no build step)", async () => {
  const mod = await importServiceModule(path.join(project, "services", "good.ts"));
  const Good = mod.Good as new () => { answer(x: number): { value: number; via: string } };
  assert.deepEqual(new Good().answer(14), { value: 42, via: "scale.ts" });
});

test("the type check passes a good module and names the file, line and column of an error in an imported file", () => {
  assert.deepEqual(typeCheckServiceModule(path.join(project, "services", "good.ts")), []);
  const diagnostics = typeCheckServiceModule(path.join(project, "services", "bad.ts"));
  assert.equal(diagnostics.length, 1);
  assert.equal(diagnostics[0]!.file, path.join(project, "services", "helper.ts"));
  assert.equal(diagnostics[0]!.line, 3);
  assert.equal(diagnostics[0]!.column, 9);
  assert.match(diagnostics[0]!.message, /Type 'string' is not assignable to type 'number'/);
  assert.throws(() => checkServiceModule(path.join(project, "services", "bad.ts")), (e: unknown) => e instanceof ServiceTypeError && /helper\.ts:3:9 - Type 'string'/.test(e.message));
});

test("the kernel finds the .ts services a cell names in string literals", () => {
  const code = 'const a = await app.service<Good>("./services/good.ts#Good", { warmup: 1 });\nawait app.service("./x.js#X");\nawait app.service(`./services/bad.ts#Bad`);\nother.service(name);';
  assert.deepEqual(serviceModulesIn(code), ["./services/good.ts", "./services/bad.ts"]);
});

test("a cell naming a service with a type error fails with file and line before any of it runs", async () => {
  const spec = new TempKernelspec();
  const { bridge } = await JupyterBridge.start(spec, project);
  try {
    const r = await bridge.execute('(globalThis as any).cellRan = true;\nconst app: any = null;\nawait app.service("./services/bad.ts#Bad", { warmup: 1 });');
    assert.equal(r.reply.status, "error");
    assert.equal(r.reply.ename, "TypeScriptError");
    assert.match(r.reply.evalue as string, /^service module: services\/helper\.ts:3:9 - Type 'string' is not assignable to type 'number'/);
    assert.deepEqual(outputsOf(r, "error")[0]?.traceback, r.reply.traceback);
    const ran = await bridge.execute("typeof (globalThis as any).cellRan");
    assert.equal(outputsOf(ran, "execute_result")[0]?.data["text/plain"], "'undefined'", "nothing of the failing cell ran, so no executor was asked for");
    const fixed = await bridge.execute('import type { Good } from "./services/good.js";\nconst pick = (g: Good) => g.answer(1).via;\ntypeof pick');
    assert.equal(fixed.reply.status, "ok", JSON.stringify(fixed.reply));
    assert.equal(outputsOf(fixed, "execute_result")[0]?.data["text/plain"], "'function'", "a good service's type imports into a cell");
    await bridge.close();
  } finally {
    bridge.kill();
    spec.remove();
  }
});

test("a script's app.service() on a TypeScript module with a type error fails with file and line, and no service is declared", async () => {
  const { startCluster } = await import("../helpers/cluster.js");
  const { connect } = await import("../../sdk/connect.js");
  const cluster = await startCluster({ agents: [{ id: "n1", cpus: 1, mem: "1g" }] });
  try {
    const app = await connect({ name: "ts-script", head: cluster.endpoint });
    try {
      await assert.rejects(app.service(`${path.join(project, "services", "bad.ts")}#Bad`), (e: unknown) => e instanceof ServiceTypeError && /helper\.ts:3:9/.test(e.message));
      const services = (await app.status()).apps.find((a) => a.name === "ts-script")?.services ?? [];
      assert.deepEqual(services, [], "nothing was declared, so no executor started");
    } finally {
      await app.close();
    }
  } finally {
    await cluster.stop();
  }
});
