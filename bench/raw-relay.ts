/**
 * A second peer for `bench rpc`: the same hops as a hearth call (driver →
 * relay → worker → relay → driver) with bare ZeroMQ and no hearth logic, to
 * separate the cost of the extra hop from the cost of hearth itself.
 * `node raw-relay.js relay` prints the relay's endpoint;
 * `node raw-relay.js worker ENDPOINT` echoes calls back through it.
 */
import { Dealer, Router } from "zeromq";

const [role, endpoint] = process.argv.slice(2);
if (role === "relay") {
  const router = new Router({ sendHighWaterMark: 0, receiveHighWaterMark: 0 });
  await router.bind("tcp://127.0.0.1:*");
  console.log(router.lastEndpoint);
  let worker: Buffer | undefined;
  for await (const [id, ...frames] of router) {
    if (id!.toString() === "worker") {
      if (frames[0]!.toString() === "hello") worker = id;
      else await router.send([frames[0]!, ...frames.slice(1)]); // [driverId, payload...]
    } else if (worker) {
      await router.send([worker, id!, ...frames]);
    }
  }
} else {
  const dealer = new Dealer({ routingId: "worker", sendHighWaterMark: 0, receiveHighWaterMark: 0 });
  dealer.connect(endpoint!);
  await dealer.send("hello");
  for await (const frames of dealer) await dealer.send(frames);
}
