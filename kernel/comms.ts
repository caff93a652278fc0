/**
 * The kernel side of Jupyter comms: the CommSink notebook code reaches
 * through `Symbol.for("hearth.comm-sink")` (sdk/notebook/comm.ts). Comms the
 * kernel opens are announced with comm_open on iopub; comm_open, comm_msg and
 * comm_close from the front end arrive on shell and are dispatched here;
 * comm_info lists what is open. A handler that throws is reported on the
 * kernel log and never breaks the channel.
 *
 * Spec: https://jupyter-client.readthedocs.io/en/stable/messaging.html#custom-messages
 */
import { randomUUID } from "node:crypto";
import { CommClosedError, type Comm, type CommData, type CommSink, type OpenCommOptions } from "../sdk/notebook/comm.js";

/** Publishes one iopub message (comm_open, comm_msg, comm_close). */
export type CommPublish = (msgType: string, content: Record<string, unknown>, metadata: Record<string, unknown>, buffers: Uint8Array[]) => void;

class KernelComm implements Comm {
  closed = false;
  private readonly messageHandlers = new Set<(data: CommData, buffers: Uint8Array[]) => void>();
  private readonly closeHandlers: Array<(data: CommData) => void> = [];

  constructor(
    readonly commId: string,
    readonly targetName: string,
    private readonly manager: CommManager,
  ) {}

  send(data: CommData, metadata: Record<string, unknown> = {}, buffers: Uint8Array[] = []): void {
    if (this.closed) throw new CommClosedError(`comm ${this.commId} (${this.targetName}) is closed`);
    this.manager.publish("comm_msg", { comm_id: this.commId, data }, metadata, buffers);
  }

  close(data: CommData = {}): void {
    if (this.closed) return;
    this.closed = true;
    this.manager.forget(this.commId);
    this.manager.publish("comm_close", { comm_id: this.commId, data }, {}, []);
  }

  onMessage(handler: (data: CommData, buffers: Uint8Array[]) => void): () => void {
    this.messageHandlers.add(handler);
    return () => this.messageHandlers.delete(handler);
  }

  onClose(handler: (data: CommData) => void): void {
    this.closeHandlers.push(handler);
  }

  /** A comm_msg from the front end. */
  deliver(data: CommData, buffers: Uint8Array[]): void {
    for (const h of [...this.messageHandlers]) this.manager.guard(`comm ${this.commId} message handler`, () => h(data, buffers));
  }

  /** A comm_close from the front end. */
  closedByFrontEnd(data: CommData): void {
    this.closed = true;
    for (const h of this.closeHandlers.splice(0)) this.manager.guard(`comm ${this.commId} close handler`, () => h(data));
  }
}

/** Open comms and registered targets of one kernel. */
export class CommManager implements CommSink {
  private readonly comms = new Map<string, KernelComm>();
  private readonly targets = new Map<string, (comm: Comm, data: CommData) => void>();

  constructor(
    private readonly publishFn: CommPublish,
    private readonly log: (line: string) => void,
  ) {}

  open(targetName: string, opts: OpenCommOptions = {}): Comm {
    const id = opts.commId ?? randomUUID();
    if (this.comms.has(id)) throw new RangeError(`comm ${id} is already open; pick another commId`);
    const comm = new KernelComm(id, targetName, this);
    this.comms.set(id, comm);
    this.publish("comm_open", { comm_id: id, target_name: targetName, data: opts.data ?? {} }, opts.metadata ?? {}, opts.buffers ?? []);
    return comm;
  }

  registerTarget(targetName: string, handler: (comm: Comm, data: CommData) => void): void {
    this.targets.set(targetName, handler);
  }

  unregisterTarget(targetName: string): void {
    this.targets.delete(targetName);
  }

  /** comm_info_reply's `comms`: every open comm, or those of one target. */
  info(targetName?: string): Record<string, { target_name: string }> {
    const out: Record<string, { target_name: string }> = {};
    for (const c of this.comms.values()) if (!targetName || c.targetName === targetName) out[c.commId] = { target_name: c.targetName };
    return out;
  }

  /** Dispatches a comm_open, comm_msg or comm_close from the front end. */
  handle(msgType: string, content: Record<string, unknown>, buffers: Uint8Array[]): void {
    const id = String(content.comm_id ?? "");
    const data = (content.data ?? {}) as CommData;
    if (msgType === "comm_open") {
      const target = String(content.target_name ?? "");
      const handler = this.targets.get(target);
      const comm = new KernelComm(id, target, this);
      if (!handler) {
        // As ipykernel does: tell the front end at once that nobody is listening.
        this.log(`comm_open for unknown target '${target}': closing it`);
        comm.close();
        return;
      }
      this.comms.set(id, comm);
      this.guard(`comm target '${target}'`, () => handler(comm, data));
      return;
    }
    const comm = this.comms.get(id);
    if (!comm) {
      this.log(`${msgType} for unknown comm ${id}: ignored`);
      return;
    }
    if (msgType === "comm_msg") comm.deliver(data, buffers);
    else if (msgType === "comm_close") {
      this.comms.delete(id);
      comm.closedByFrontEnd(data);
    }
  }

  /** Closes every open comm (kernel shutdown). */
  closeAll(): void {
    for (const c of [...this.comms.values()]) c.close();
  }

  /** @internal */
  publish(msgType: string, content: Record<string, unknown>, metadata: Record<string, unknown>, buffers: Uint8Array[]): void {
    this.publishFn(msgType, content, metadata, buffers);
  }

  /** @internal */
  forget(id: string): void {
    this.comms.delete(id);
  }

  /** @internal Runs a user handler; its error goes to the kernel log and the cell's stderr, not up the stack. */
  guard(what: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log(`${what} threw: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
      process.stderr.write(`${what} threw: ${err instanceof Error ? err.message : String(err)}\n`);
    }
  }
}
