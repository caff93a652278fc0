// Unit tests of sdk/notebook outside any kernel: bundles, text fallbacks, the sink protocol.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { test } from "node:test";
import {
  DISPLAY_SINK,
  JUPYTER_DISPLAY,
  PLOTLY_MIME,
  barChart,
  display,
  lineChart,
  progress,
  statusView,
  table,
  toMimeBundle,
  trainingMonitor,
  type DisplayOptions,
  type MimeBundle,
} from "../../sdk/notebook/index.js";
import type { AppStatus } from "../../sdk/runtime/app.js";

/** Captures what the SDK sends to a kernel's display sink while `fn` runs. */
function withSink(fn: () => void): Array<{ bundle: MimeBundle; opts: DisplayOptions }> {
  const seen: Array<{ bundle: MimeBundle; opts: DisplayOptions }> = [];
  const g = globalThis as Record<symbol, unknown>;
  g[DISPLAY_SINK] = { display: (bundle: MimeBundle, opts: DisplayOptions) => seen.push({ bundle, opts }) };
  try {
    fn();
  } finally {
    delete g[DISPLAY_SINK];
  }
  return seen;
}

test("toMimeBundle: own rendering with text/plain filled in, else inspect text", () => {
  assert.deepEqual(toMimeBundle(42), { "text/plain": "42" });
  assert.deepEqual(toMimeBundle("a"), { "text/plain": "'a'" });
  const rich = { [JUPYTER_DISPLAY]: () => ({ "text/html": "<b>x</b>" }) as unknown as MimeBundle };
  const b = toMimeBundle(rich);
  assert.equal(b["text/html"], "<b>x</b>");
  assert.equal(typeof b["text/plain"], "string");
});

test("table: escaped HTML, aligned text, row limit", () => {
  const t = table([{ name: "<a>", score: 0.123456 }, { name: "b", score: 2 }, { name: "c", score: 3 }], { limit: 2, title: "scores" });
  const b = t[JUPYTER_DISPLAY]();
  assert.match(b["text/html"] as string, /&lt;a&gt;/);
  assert.doesNotMatch(b["text/html"] as string, /<a>/);
  assert.match(b["text/plain"], /^scores\nname\s+score\n-+\s+-+\n<a>\s+0\.1235\nb\s+2\n1 more row\(s\) of 3$/);
  assert.equal(t.numRows, 3);
});

test("figure: plotly JSON, HTML that inlines plotly.js into the first figure of the process only, text summary", () => {
  // The first figure of a notebook (a process) carries plotly.js; start this test as such a first figure.
  delete (globalThis as Record<symbol, unknown>)[Symbol.for("hearth.notebook.plotly-inlined")];
  const plotlyJs = readFileSync(createRequire(import.meta.url).resolve("plotly.js-dist-min/plotly.min.js"), "utf8");
  const first = lineChart({ reward: [0.1, 0.2, 0.4] }, { title: "reward" })[JUPYTER_DISPLAY]();
  const second = barChart({ a: 1, b: 2 })[JUPYTER_DISPLAY]();
  assert.deepEqual(Object.keys(first).sort(), [PLOTLY_MIME, "text/html", "text/plain"].sort());
  assert.equal((first[PLOTLY_MIME] as { data: unknown[] }).data.length, 1);
  assert.equal(first["text/plain"], 'Figure "reward": reward (scatter, 3 points)');
  const head = plotlyJs.slice(0, 200);
  assert.ok((first["text/html"] as string).includes(head), "the first figure inlines plotly.min.js");
  assert.ok((first["text/html"] as string).length > plotlyJs.length, "the whole of plotly.min.js");
  assert.ok(!(second["text/html"] as string).includes(head), "the second figure does not inline it again");
  assert.ok((second["text/html"] as string).length < 10_000);
});

test("progress in a notebook: one display_id, shown once then updated in place", () => {
  const seen = withSink(() => {
    const bar = progress(3, { label: "steps", intervalMs: 0 });
    bar.tick();
    bar.tick();
    bar.tick();
    bar.finish("done");
  });
  const ids = new Set(seen.map((s) => s.opts.displayId));
  assert.equal(ids.size, 1);
  assert.equal(seen[0]!.opts.update, undefined);
  assert.ok(seen.slice(1).every((s) => s.opts.update === true));
  assert.match(seen.at(-1)!.bundle["text/plain"], /^steps \[#+\] 3\/3 100% .* done$/);
  assert.match(seen.at(-1)!.bundle["text/html"] as string, /<progress value="3" max="3"/);
});

test("outside a notebook: display prints text/plain, a non-terminal bar prints only its final line", () => {
  const writes: string[] = [];
  const fake = { isTTY: false, write: (s: string) => writes.push(s) } as unknown as NodeJS.WriteStream;
  const bar = progress(2, { label: "sync", stream: fake, intervalMs: 0 });
  bar.tick();
  bar.tick();
  assert.equal(writes.length, 1);
  assert.match(writes[0]!, /^sync \[#+\] 2\/2 100%/);
  const original = process.stdout.write;
  const printed: string[] = [];
  process.stdout.write = ((s: string) => (printed.push(s), true)) as typeof process.stdout.write;
  try {
    display({ [JUPYTER_DISPLAY]: () => ({ "text/plain": "plain text", "text/html": "<i>x</i>" }) });
  } finally {
    process.stdout.write = original;
  }
  assert.deepEqual(printed, ["plain text\n"]);
});

test("statusView: services and executors as HTML table and text", () => {
  const status: AppStatus = {
    head: { id: "h", endpoint: "tcp://127.0.0.1:5555", pid: 1, uptimeMs: 3000 },
    agents: [{ id: "a1", host: "127.0.0.1", total: { cpu: 4, mem: 1 << 30, gpus: ["0"] }, free: { cpu: 2, mem: 1 << 29, gpus: [] }, executors: 2 }],
    apps: [
      {
        name: "demo",
        drivers: 1,
        keepAliveMs: 1_800_000,
        releaseAt: null,
        services: [
          {
            id: "s1", name: "rollout", kind: "pool", state: "ready", resreq: "cpu=1", warmup: 1, max: 4, queued: 3, inflight: 1, error: null,
            executors: [{ id: "x001", state: "serving", agent: "a1", pid: 10, rank: null, gpus: ["0"], inflight: 1, callsDone: 7, idleMs: 0 }],
          },
        ],
      },
      { name: "_hearth-status", drivers: 1, keepAliveMs: 0, releaseAt: null, services: [] },
    ],
  } as unknown as AppStatus;
  const b = statusView(status)[JUPYTER_DISPLAY]();
  assert.match(b["text/plain"], /rollout \[pool, ready\] cpu=1: 1 executor\(s\) \(warmup 1, max 4\), queued 3, in flight 1/);
  assert.match(b["text/plain"], /x001\s+serving\s+a1/);
  assert.doesNotMatch(b["text/plain"], /_hearth-status/);
  assert.match(b["text/html"] as string, /<td style="text-align: left">x001<\/td>/);
});

test("trainingMonitor outside a notebook: takes interface-typed points, stop() aborts its signal, renders a chart snapshot without a widget", () => {
  interface Metrics {
    step: number;
    reward_mean: number;
    label: string;
  }
  const monitor = trainingMonitor({ title: "run", metrics: ["reward_mean"], intervalMs: 0 });
  const points: Metrics[] = [
    { step: 1, reward_mean: 0.25, label: "a" },
    { step: 2, reward_mean: 0.5, label: "b" },
  ];
  for (const p of points) monitor.push(p);
  monitor.push({ step: 3, reward_mean: 0.75, extra: true });
  assert.equal(monitor.signal.aborted, false);
  monitor.stop();
  assert.equal(monitor.signal.aborted, true);
  assert.match(String(monitor.signal.reason), /training stopped/);
  monitor.finish();
  const b = monitor[JUPYTER_DISPLAY]();
  assert.deepEqual(Object.keys(b).sort(), ["text/html", "text/plain"], "no widget view without a kernel's comms");
  assert.equal(b["text/plain"], "run: step 3 reward_mean 0.75 (stopped at step 3)");
  assert.equal((b["text/html"] as string).match(/<polyline /g)?.length, 1, "one chart per metric");
  assert.throws(() => monitor.push({ step: Number.NaN }), /point\.step must be a number/);
});
