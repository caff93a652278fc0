/**
 * The kernel's five ZeroMQ sockets, bound to the ports of the connection file:
 * shell and control (ROUTER), iopub (PUB), stdin (ROUTER) and heartbeat (REP,
 * echoed here). Each socket's sends go through one promise chain because a
 * zeromq v6 socket allows one send in flight at a time.
 */
import * as zmq from "zeromq";
import { parseMessage, serializeMessage, Signer, WireError, type ConnectionInfo, type JupyterMessage } from "./wire.js";

/** The request channels a client sends on. */
export type Channel = "shell" | "control";

/** Receives every valid message from shell and control; bad messages go to `onBadMessage`. */
export interface SocketListener {
  onMessage(channel: Channel, msg: JupyterMessage): void;
  onBadMessage(channel: Channel, err: Error): void;
}

/** Serializes sends on one socket, in call order. */
class SendQueue {
  private tail: Promise<void> = Promise.resolve();

  constructor(private readonly socket: zmq.Writable & zmq.Socket) {}

  send(frames: Buffer[]): Promise<void> {
    const next = this.tail.then(async () => {
      if (!this.socket.closed) await this.socket.send(frames);
    });
    this.tail = next.catch(() => undefined);
    return next;
  }

  drain(): Promise<void> {
    return this.tail;
  }
}

/** Bound sockets plus signing; `send*` methods sign and queue a message. */
export class KernelSockets {
  readonly signer: Signer;
  private readonly shell = new zmq.Router();
  private readonly control = new zmq.Router();
  private readonly stdin = new zmq.Router();
  private readonly iopub = new zmq.Publisher();
  private readonly heartbeat = new zmq.Reply();
  private readonly queues: Record<"shell" | "control" | "iopub", SendQueue>;
  private loops: Promise<void>[] = [];

  private constructor(private readonly info: ConnectionInfo) {
    this.signer = new Signer(info.key ?? "");
    this.queues = { shell: new SendQueue(this.shell), control: new SendQueue(this.control), iopub: new SendQueue(this.iopub) };
  }

  /** Binds all five sockets to the connection file's ports. */
  static async bind(info: ConnectionInfo): Promise<KernelSockets> {
    const s = new KernelSockets(info);
    const addr = (port: number) => (info.transport === "ipc" ? `ipc://${info.ip}-${port}` : `tcp://${info.ip}:${port}`);
    await Promise.all([
      s.shell.bind(addr(info.shell_port)),
      s.control.bind(addr(info.control_port)),
      s.stdin.bind(addr(info.stdin_port)),
      s.iopub.bind(addr(info.iopub_port)),
      s.heartbeat.bind(addr(info.hb_port)),
    ]);
    return s;
  }

  /** Starts the receive loops; messages go to `listener` until `close()`. */
  listen(listener: SocketListener): void {
    const loop = async (channel: Channel, socket: zmq.Router) => {
      for await (const frames of socket) {
        let msg: JupyterMessage;
        try {
          msg = parseMessage(frames, this.signer);
        } catch (err) {
          listener.onBadMessage(channel, err instanceof Error ? err : new WireError(String(err)));
          continue;
        }
        listener.onMessage(channel, msg);
      }
    };
    const echo = async () => {
      for await (const frames of this.heartbeat) await this.heartbeat.send(frames);
    };
    // A receive loop ends with EAGAIN/ETERM when its socket closes; that is the normal end.
    const quiet = (p: Promise<void>) => p.catch((err: unknown) => {
      if (!this.shell.closed) throw err;
    });
    this.loops = [quiet(loop("shell", this.shell)), quiet(loop("control", this.control)), quiet(echo())];
  }

  /** Signs and sends a reply on the channel the request came from. */
  reply(channel: Channel, msg: JupyterMessage<unknown>): Promise<void> {
    return this.queues[channel].send(serializeMessage(msg, this.signer));
  }

  /** Signs and publishes on iopub; the topic frame is `kernel.<msg_type>`. */
  publish(msg: JupyterMessage<unknown>): Promise<void> {
    return this.queues.iopub.send(serializeMessage({ ...msg, ids: [Buffer.from(`kernel.${msg.header.msg_type}`)] }, this.signer));
  }

  /** Waits for queued sends, then closes every socket. Idempotent. */
  async close(): Promise<void> {
    if (this.shell.closed) return;
    await Promise.all([this.queues.shell.drain(), this.queues.control.drain(), this.queues.iopub.drain()]);
    for (const s of [this.shell, this.control, this.stdin, this.iopub, this.heartbeat]) s.close();
    await Promise.allSettled(this.loops);
  }

  /** The connection this kernel is bound to. */
  get connection(): ConnectionInfo {
    return this.info;
  }
}
