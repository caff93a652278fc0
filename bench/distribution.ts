/**
 * `npm run bench -- distribution [--nodes N] [--mib M] [--chunk-mib C] [--uplink-mibps R]`:
 * a simulated distribution of one small object to N nodes (default 100),
 * in one process on loopback, as the head's distribution tree places them
 * (cluster-agent/head/distribution-tree.ts, fan-out 2) against a chain (the
 * same class with fan-out 1, what the head did before). Every node is a TCP
 * server and a client of its parent: it asks its parent for the object, and
 * passes each chunk on to its own children as soon as it has it
 * (pass-through, as node caches do). Each node's uplink (the head's too) is
 * paced to R MiB/s (default 4) shared by everything it sends, as a NIC
 * is: in one process on 2 cores, loopback alone would make every link as
 * fast as the CPU and hide what the shape of the tree costs. Prints the
 * tree's depth and the time from the first request to the last node's last
 * byte, for both shapes.
 */
import net from "node:net";
import { DistributionTrees, HEAD } from "../cluster-agent/head/distribution-tree.js";

const MiB = 1024 * 1024;

/** One shape's result. */
export interface DistributionResult {
  shape: string;
  fanout: number;
  nodes: number;
  depth: number;
  /** ms from the start to the last node's last byte. */
  lastNodeMs: number;
  /** ms to the first node's last byte. */
  firstNodeMs: number;
  /** Chunks the head sent (a base once: the object's chunk count). */
  headChunks: number;
}

/** Options of the simulation. */
export interface DistributionOptions {
  nodes: number;
  bytes: number;
  chunk: number;
  /** Bytes per second each uplink sends. */
  uplink: number;
}

/**
 * 100 nodes, 1 MiB in 256 KiB chunks, 4 MiB/s per uplink: slow enough that
 * the pacing, not this one process's CPU (which moves all 100 copies, about
 * 0.6 s of it on this machine), sets the pace.
 */
export const DISTRIBUTION_DEFAULTS: DistributionOptions = { nodes: 100, bytes: MiB, chunk: MiB / 4, uplink: 4 * MiB };

/** A sender's uplink: every chunk it sends waits for its turn at `rate` bytes/s. */
class Uplink {
  private freeAt = 0;
  constructor(private readonly rate: number) {}

  /** Resolves when `bytes` more may leave (the time they take on the wire at `rate`). */
  async turn(bytes: number): Promise<void> {
    const now = performance.now();
    const start = Math.max(now, this.freeAt);
    this.freeAt = start + (bytes / this.rate) * 1000;
    const wait = this.freeAt - now;
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
  }
}

/** A node (or the head): the chunks it holds, the children it feeds, its server. */
class SimNode {
  readonly chunks: Buffer[] = [];
  private readonly waiting = new Set<() => void>();
  readonly uplink: Uplink;
  server?: net.Server;
  port = 0;
  doneAt = 0;
  sent = 0;

  constructor(
    readonly id: string,
    private readonly total: number,
    rate: number,
  ) {
    this.uplink = new Uplink(rate);
  }

  add(chunk: Buffer): void {
    this.chunks.push(chunk);
    for (const w of this.waiting) w();
    this.waiting.clear();
  }

  /** Resolves when chunk `i` is here. */
  async has(i: number): Promise<void> {
    while (this.chunks.length <= i) await new Promise<void>((r) => this.waiting.add(r));
  }

  /** Serves its copy: each client gets every chunk, in order, as it arrives (pass-through), through the uplink. */
  async listen(): Promise<void> {
    this.server = net.createServer((sock) => {
      sock.on("error", () => undefined);
      void (async () => {
        for (let i = 0; i < this.total; i++) {
          await this.has(i);
          const c = this.chunks[i]!;
          await this.uplink.turn(c.byteLength);
          this.sent++;
          if (!sock.write(c)) await new Promise((r) => sock.once("drain", r));
        }
        sock.end();
      })();
    });
    await new Promise<void>((r) => this.server!.listen(0, "127.0.0.1", r));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Copies from `from`: every byte, cut back into chunks of `chunk` bytes as they come. */
  async copyFrom(from: SimNode, chunk: number, start: number): Promise<void> {
    const sock = net.connect(from.port, "127.0.0.1");
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    await new Promise<void>((resolve, reject) => {
      sock.on("data", (d: Buffer) => {
        pending.push(d);
        pendingBytes += d.byteLength;
        while (pendingBytes >= chunk) {
          const all = Buffer.concat(pending);
          this.add(all.subarray(0, chunk));
          pending = [all.subarray(chunk)];
          pendingBytes -= chunk;
        }
      });
      sock.on("end", () => {
        if (pendingBytes > 0) this.add(Buffer.concat(pending));
        resolve();
      });
      sock.on("error", reject);
    });
    this.doneAt = performance.now() - start;
  }

  close(): void {
    this.server?.close();
  }
}

/** Distributes one object of `o.bytes` to `o.nodes` nodes placed by a tree of `fanout` (1: a chain). */
export async function simulateDistribution(o: DistributionOptions, fanout: number): Promise<DistributionResult> {
  const total = Math.ceil(o.bytes / o.chunk);
  const head = new SimNode(HEAD, total, o.uplink);
  for (let i = 0; i < total; i++) head.add(Buffer.alloc(Math.min(o.chunk, o.bytes - i * o.chunk), i & 0xff));
  const nodes = Array.from({ length: o.nodes }, (_, i) => new SimNode(`n${i}`, total, o.uplink));
  const byId = new Map<string, SimNode>([[HEAD, head], ...nodes.map((n) => [n.id, n] as [string, SimNode])]);
  const trees = new DistributionTrees(fanout);
  // Every node asks at once, as when a publication lands on every node: the head places them in order.
  const parents = nodes.map((n) => trees.assign("bench/obj", 1, n.id, () => true));
  try {
    await Promise.all([head, ...nodes].map((n) => n.listen()));
    const start = performance.now();
    await Promise.all(nodes.map((n, i) => n.copyFrom(byId.get(parents[i]!)!, o.chunk, start)));
    for (const n of nodes) {
      const got = n.chunks.reduce((s, c) => s + c.byteLength, 0);
      if (got !== o.bytes) throw new Error(`node ${n.id} got ${got} of ${o.bytes} bytes`);
    }
    return {
      shape: fanout === 1 ? "chain" : `tree (fan-out ${fanout})`,
      fanout,
      nodes: o.nodes,
      depth: Math.max(...nodes.map((n) => trees.depth("bench/obj", n.id) ?? 0)),
      lastNodeMs: Math.max(...nodes.map((n) => n.doneAt)),
      firstNodeMs: Math.min(...nodes.map((n) => n.doneAt)),
      headChunks: head.sent,
    };
  } finally {
    for (const n of byId.values()) n.close();
  }
}

/** Both shapes, printed. */
export async function runDistributionBench(o: DistributionOptions, log: (line: string) => void = console.log): Promise<DistributionResult[]> {
  const out: DistributionResult[] = [];
  for (const fanout of [2, 1]) out.push(await simulateDistribution(o, fanout));
  log(`simulated distribution of ${(o.bytes / MiB).toFixed(1)} MiB to ${o.nodes} nodes (one process, loopback; ${(o.chunk / MiB).toFixed(2)} MiB chunks passed on as they arrive; each uplink paced to ${(o.uplink / MiB).toFixed(0)} MiB/s):`);
  for (const r of out) log(`  ${r.shape}: depth ${r.depth}, first node ${r.firstNodeMs.toFixed(0)} ms, last node ${r.lastNodeMs.toFixed(0)} ms; the head sent ${r.headChunks} chunk(s) (the object is ${Math.ceil(o.bytes / o.chunk)})`);
  const [tree, chain] = out;
  log(`  last node: tree ${(chain!.lastNodeMs / tree!.lastNodeMs).toFixed(1)}× sooner than the chain`);
  return out;
}

/** `npm run bench -- distribution [--nodes N] [--mib M] [--chunk-mib C] [--uplink-mibps R]`. */
export async function benchDistribution(args: string[]): Promise<DistributionResult[]> {
  const o: DistributionOptions = { ...DISTRIBUTION_DEFAULTS };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const v = Number(args[++i]);
    if (!(v > 0)) throw new Error(`bench distribution: ${a} needs a positive number`);
    if (a === "--nodes") o.nodes = Math.floor(v);
    else if (a === "--mib") o.bytes = Math.floor(v * MiB);
    else if (a === "--chunk-mib") o.chunk = Math.floor(v * MiB);
    else if (a === "--uplink-mibps") o.uplink = v * MiB;
    else throw new Error(`bench distribution: unknown argument ${a} (--nodes N, --mib M, --chunk-mib C, --uplink-mibps R)`);
  }
  return runDistributionBench(o);
}
