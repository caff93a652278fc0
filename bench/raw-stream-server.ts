/**
 * The peer of `bench weights`' raw stream: a bare ZeroMQ ROUTER that answers
 * each chunk request (`{"length": n}`) with n bytes, in its own process like
 * the head. Prints its endpoint on stdout.
 */
import { Router } from "zeromq";

const CHUNK = 8 * 1024 * 1024;
const data = Buffer.alloc(CHUNK, 7);
const router = new Router({ sendHighWaterMark: 0, receiveHighWaterMark: 0 });
await router.bind("tcp://127.0.0.1:*");
console.log(router.lastEndpoint);
for await (const [id, req] of router) {
  const { length } = JSON.parse(req!.toString()) as { length: number };
  await router.send([id!, data.subarray(0, Math.min(length, CHUNK))]);
}
