/**
 * Which local address and interface this machine uses to reach a peer: the
 * answer for an agent's advertised address (`hearth agent --host route`) and
 * for gloo's GLOO_SOCKET_IFNAME on a gang that spans hosts. A node's hostname
 * may resolve to loopback (Debian's /etc/hosts, network namespaces), which
 * peers on other hosts cannot reach; the route to a peer cannot be wrong.
 */
import dgram from "node:dgram";
import os from "node:os";
import { HearthError } from "../errors/index.js";

/** True for 127.x, localhost and ::1. */
export function isLoopbackHost(host: string): boolean {
  return /^(127\.|localhost$|::1$|\[::1\]$)/.test(host);
}

/**
 * The local IPv4 address the kernel picks to send to `host:port` (a UDP
 * socket's connect: a route lookup, no packet is sent). Times out after 5 s
 * (a name that does not resolve).
 */
export function localAddressToward(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = dgram.createSocket("udp4");
    const timer = setTimeout(() => {
      sock.close();
      reject(new HearthError(`no route to ${host}:${port} found within 5 s`));
    }, 5000);
    sock.once("error", (err) => {
      clearTimeout(timer);
      sock.close();
      reject(new HearthError(`no route to ${host}:${port}: ${err.message}`, { cause: err }));
    });
    sock.connect(port, host, () => {
      clearTimeout(timer);
      const addr = sock.address().address;
      sock.close();
      resolve(addr);
    });
  });
}

/** The network interface that holds `address` (e.g. "eth0"), or undefined. */
export function interfaceOf(address: string): string | undefined {
  for (const [name, addrs] of Object.entries(os.networkInterfaces())) {
    if (addrs?.some((a) => a.address === address)) return name;
  }
  return undefined;
}

/**
 * The interface gloo should use to reach a gang whose rendezvous is at
 * `host:port`: "lo" for a loopback rendezvous, else the one on the route to it.
 */
export async function interfaceToward(host: string, port: number): Promise<string> {
  if (isLoopbackHost(host)) return "lo";
  const addr = await localAddressToward(host, port);
  const name = interfaceOf(addr);
  if (!name) throw new HearthError(`the route to ${host}:${port} leaves from ${addr}, which no interface of this machine holds`);
  return name;
}
