/**
 * The kernel's second thread: it owns the control ROUTER and the heartbeat
 * REP socket, so both answer while a cell blocks the main thread (ipykernel
 * runs its heartbeat in a thread for the same reason). An interrupt_request
 * raises SIGINT on the process at once, which stops even a synchronous loop;
 * every control message, interrupts included, is then forwarded to the main
 * thread, whose router answers it. Replies come back as frames to send.
 *
 * Runs as a worker_threads Worker started by sockets.ts; workerData is
 * ControlThreadData.
 */
import { parentPort, workerData } from "node:worker_threads";
import * as zmq from "zeromq";
import { parseMessage, Signer } from "./wire.js";

/** What the main thread passes to the worker. */
export interface ControlThreadData {
  controlAddress: string;
  heartbeatAddress: string;
  key: string;
}

/** Messages between the threads. */
export type ControlThreadMessage =
  | { type: "bound" }
  | { type: "bind-failed"; error: string }
  | { type: "received"; frames: Uint8Array[] }
  | { type: "send"; frames: Uint8Array[] }
  | { type: "close" };

async function main(port: NonNullable<typeof parentPort>, data: ControlThreadData): Promise<void> {
  const control = new zmq.Router();
  const heartbeat = new zmq.Reply();
  const signer = new Signer(data.key);
  try {
    await Promise.all([control.bind(data.controlAddress), heartbeat.bind(data.heartbeatAddress)]);
  } catch (err) {
    port.postMessage({ type: "bind-failed", error: String(err) } satisfies ControlThreadMessage);
    control.close();
    heartbeat.close();
    return;
  }
  let sending: Promise<void> = Promise.resolve();
  port.on("message", (m: ControlThreadMessage) => {
    if (m.type === "send") {
      sending = sending.then(() => control.send(m.frames.map((f) => Buffer.from(f)))).catch(() => undefined);
    } else if (m.type === "close") {
      void sending.finally(() => {
        control.close();
        heartbeat.close();
        port.close();
      });
    }
  });
  port.postMessage({ type: "bound" } satisfies ControlThreadMessage);
  const echo = (async () => {
    for await (const frames of heartbeat) await heartbeat.send(frames);
  })();
  for await (const frames of control) {
    try {
      if (parseMessage(frames, signer).header.msg_type === "interrupt_request") process.kill(process.pid, "SIGINT");
    } catch {
      // A bad message: the main thread parses it again and logs why it was dropped.
    }
    port.postMessage({ type: "received", frames } satisfies ControlThreadMessage);
  }
  await echo.catch(() => undefined);
}

if (parentPort) {
  main(parentPort, workerData as ControlThreadData).catch((err: unknown) => {
    // Receive loops end with an error when their socket closes; anything else is reported to stderr.
    if (!String(err).includes("closed")) process.stderr.write(`[hearth kernel] control thread: ${String(err)}\n`);
  });
}
