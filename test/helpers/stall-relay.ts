/**
 * A TCP relay that can stall a link the way a congested network does: put
 * between an agent and its head, it forwards bytes both ways until armed;
 * then the first connection to carry `threshold` bytes towards the agent is
 * held (nothing more reaches the agent on it) until release(). Tests use it
 * to keep a large head fetch in flight for as long as they need, without
 * touching the head or the agent.
 */
import net from "node:net";

/** A running relay. */
export interface StallRelay {
  /** Where the agent dials instead of the head. */
  endpoint: string;
  /** Starts counting: the next connection to carry `threshold` bytes towards the agent stalls. */
  arm(threshold: number): void;
  /** Resolves when a connection has stalled since the last arm(). */
  stalled(): Promise<void>;
  /** Whether a connection is held now. */
  isStalled(): boolean;
  /** Lets the held bytes through and forwards normally again. */
  release(): void;
  close(): Promise<void>;
}

/** Starts a relay on loopback to `target` ("tcp://host:port"). */
export async function startStallRelay(target: string): Promise<StallRelay> {
  const m = /^tcp:\/\/([^:]+):(\d+)$/.exec(target);
  if (!m) throw new Error(`stall relay: target must be tcp://host:port; got '${target}'`);
  const [host, port] = [m[1]!, Number(m[2])];
  const sockets = new Set<net.Socket>();
  let threshold = Infinity;
  let held: net.Socket | undefined;
  const counted = new Map<net.Socket, number>();
  let onStall: () => void = () => {};
  let stall = new Promise<void>((r) => (onStall = r));

  const server = net.createServer((down) => {
    const up = net.connect(port, host);
    sockets.add(down).add(up);
    down.pipe(up);
    up.on("data", (chunk: Buffer) => {
      if (held === up) return; // paused below; never reached
      const n = (counted.get(up) ?? 0) + chunk.byteLength;
      counted.set(up, n);
      down.write(chunk);
      if (held === undefined && n >= threshold) {
        held = up;
        up.pause();
        onStall();
      }
    });
    const end = (): void => {
      up.destroy();
      down.destroy();
      sockets.delete(up);
      sockets.delete(down);
    };
    up.on("error", end).on("close", end);
    down.on("error", end).on("close", end);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port: own } = server.address() as net.AddressInfo;

  return {
    endpoint: `tcp://127.0.0.1:${own}`,
    arm(bytes) {
      counted.clear();
      threshold = bytes;
      held = undefined;
      stall = new Promise<void>((r) => (onStall = r));
    },
    stalled: () => stall,
    isStalled: () => held !== undefined,
    release() {
      threshold = Infinity;
      const h = held;
      held = undefined;
      h?.resume();
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
