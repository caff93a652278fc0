/**
 * The peer for `bench rpc`: a bare ZeroMQ ROUTER that echoes every message,
 * in its own process like the head. Prints its endpoint on stdout.
 */
import { Router } from "zeromq";

const router = new Router({ sendHighWaterMark: 0, receiveHighWaterMark: 0 });
await router.bind("tcp://127.0.0.1:*");
console.log(router.lastEndpoint);
for await (const frames of router) await router.send(frames);
