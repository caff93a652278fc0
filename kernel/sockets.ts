/**
 * The kernel's five ZeroMQ sockets, bound to the ports of the connection file:
 * shell (ROUTER), iopub (PUB) and stdin (ROUTER) on the main thread; control
 * (ROUTER) and heartbeat (REP) on a worker thread (control-thread.ts) so that
 * they answer while a cell blocks the main thread. Each socket's sends go
 * through one promise chain because a zeromq v6 socket allows one send in
 * flight at a time.
 */
import { Worker } from "node:worker_threads";
import * as zmq from "zeromq";
import type { ControlThreadData, ControlThreadMessage } from "./control-thread.js";
import { parseMessage, serializeMessage, Signer, WireError, type ConnectionInfo, type JupyterMessage } from "./wire.js";

/** The request channels a client sends on. */
export type Channel = "shell" | "control";

/** Receives every valid message from shell and control; bad messages go to `onBadMessage`. */
export interface SocketListener {
  onMessage(channel: Channel, msg: JupyterMessage): void;
  /** An input_reply (or another message) from a client's stdin socket. */
  onStdin(msg: JupyterMessage): void;
  onBadMessage(channel: Channel | "stdin", err: Error): void;
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

/** The worker thread that owns control and heartbeat; frames cross threads by postMessage. */
class ControlThread {
  private listener: ((frames: Buffer[]) => void) | null = null;
  private readonly exited: Promise<void>;

  private constructor(private readonly worker: Worker) {
    this.exited = new Promise((resolve) => worker.once("exit", () => resolve()));
    worker.on("message", (m: ControlThreadMessage) => {
      if (m.type === "received") this.listener?.(m.frames.map((f) => Buffer.from(f.buffer, f.byteOffset, f.byteLength)));
    });
  }

  /** Starts the worker and waits until both of its sockets are bound. */
  static start(data: ControlThreadData): Promise<ControlThread> {
    const worker = new Worker(new URL("./control-thread.js", import.meta.url), { workerData: data });
    return new Promise((resolve, reject) => {
      const onMessage = (m: ControlThreadMessage) => {
        if (m.type !== "bound" && m.type !== "bind-failed") return;
        worker.off("message", onMessage);
        if (m.type === "bound") resolve(new ControlThread(worker));
        else reject(new WireError(`cannot bind control/heartbeat: ${m.error}`));
      };
      worker.on("message", onMessage);
      worker.once("error", reject);
    });
  }

  onFrames(listener: (frames: Buffer[]) => void): void {
    this.listener = listener;
  }

  /** Queues frames for the worker to send on control (the worker keeps them in order). */
  send(frames: Buffer[]): Promise<void> {
    this.worker.postMessage({ type: "send", frames } satisfies ControlThreadMessage);
    return Promise.resolve();
  }

  /** Asks the worker to send what is queued, close its sockets and exit. */
  async close(): Promise<void> {
    this.worker.postMessage({ type: "close" } satisfies ControlThreadMessage);
    await this.exited;
  }
}

/** Bound sockets plus signing; `reply` and `publish` sign and queue a message. */
export class KernelSockets {
  readonly signer: Signer;
  private readonly shell = new zmq.Router();
  private readonly stdin = new zmq.Router();
  private readonly iopub = new zmq.Publisher();
  private readonly queues: Record<"shell" | "iopub" | "stdin", SendQueue>;
  private shellLoop: Promise<void> = Promise.resolve();
  private stdinLoop: Promise<void> = Promise.resolve();
  private closed = false;

  private constructor(
    private readonly info: ConnectionInfo,
    private readonly control: ControlThread,
  ) {
    this.signer = new Signer(info.key ?? "");
    this.queues = { shell: new SendQueue(this.shell), iopub: new SendQueue(this.iopub), stdin: new SendQueue(this.stdin) };
  }

  /** Binds all five sockets to the connection file's ports. */
  static async bind(info: ConnectionInfo): Promise<KernelSockets> {
    const addr = (port: number) => (info.transport === "ipc" ? `ipc://${info.ip}-${port}` : `tcp://${info.ip}:${port}`);
    const control = await ControlThread.start({ controlAddress: addr(info.control_port), heartbeatAddress: addr(info.hb_port), key: info.key ?? "" });
    const s = new KernelSockets(info, control);
    try {
      await Promise.all([s.shell.bind(addr(info.shell_port)), s.stdin.bind(addr(info.stdin_port)), s.iopub.bind(addr(info.iopub_port))]);
    } catch (err) {
      await s.close();
      throw err;
    }
    return s;
  }

  /** Starts receiving; messages go to `listener` until `close()`. */
  listen(listener: SocketListener): void {
    const deliver = (channel: Channel | "stdin", frames: Buffer[]) => {
      let msg: JupyterMessage;
      try {
        msg = parseMessage(frames, this.signer);
      } catch (err) {
        listener.onBadMessage(channel, err instanceof Error ? err : new WireError(String(err)));
        return;
      }
      if (channel === "stdin") listener.onStdin(msg);
      else listener.onMessage(channel, msg);
    };
    this.control.onFrames((frames) => deliver("control", frames));
    this.shellLoop = (async () => {
      for await (const frames of this.shell) deliver("shell", frames);
    })().catch((err: unknown) => {
      // The receive loop ends with an error when the socket closes; that is the normal end.
      if (!this.closed) throw err;
    });
    this.stdinLoop = (async () => {
      for await (const frames of this.stdin) deliver("stdin", frames);
    })().catch((err: unknown) => {
      if (!this.closed) throw err;
    });
  }

  /** Signs and sends a request (input_request) to a client's stdin socket; `msg.ids` name the client. */
  sendStdin(msg: JupyterMessage<unknown>): Promise<void> {
    return this.queues.stdin.send(serializeMessage(msg, this.signer));
  }

  /** Signs and sends a reply on the channel the request came from. */
  reply(channel: Channel, msg: JupyterMessage<unknown>): Promise<void> {
    const frames = serializeMessage(msg, this.signer);
    return channel === "control" ? this.control.send(frames) : this.queues.shell.send(frames);
  }

  /** Signs and publishes on iopub; the topic frame is `kernel.<msg_type>`. */
  publish(msg: JupyterMessage<unknown>): Promise<void> {
    return this.queues.iopub.send(serializeMessage({ ...msg, ids: [Buffer.from(`kernel.${msg.header.msg_type}`)] }, this.signer));
  }

  /** Waits for queued sends, then closes every socket and the control thread. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([this.queues.shell.drain(), this.queues.iopub.drain(), this.queues.stdin.drain()]);
    for (const s of [this.shell, this.stdin, this.iopub]) s.close();
    await Promise.all([this.control.close(), this.shellLoop.catch(() => undefined), this.stdinLoop.catch(() => undefined)]);
  }

  /** The connection this kernel is bound to. */
  get connection(): ConnectionInfo {
    return this.info;
  }
}
