/**
 * Two (or more) "hosts" on one machine for tests: each a Linux network
 * namespace (`ip netns`, Debian's iproute2) with its own address, joined to
 * the test's own namespace by a veth pair on a throw-away bridge. The test
 * process, the head and slurmctld stay in the root namespace and reach the
 * hosts at their addresses; the hosts reach them at the bridge's address
 * (the gateway). Cutting a host sets the root side of its veth down: its
 * packets go nowhere (no reset, no error), exactly like a pulled cable, so
 * liveness has to be noticed by heartbeats.
 *
 * Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for `ip netns add`);
 * `netnsSupport()` says why not when it cannot work, and the tests skip with
 * that reason only.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { randomBytes } from "node:crypto";

const IP = "/usr/sbin/ip";

/** One namespace "host". */
export interface NetHost {
  /** Name given by the test (the Slurm node name). */
  name: string;
  /** The namespace (`ip netns exec <ns> ...`). */
  ns: string;
  /** Its address on the bridge, e.g. 10.213.7.2. */
  addr: string;
  /** The root side of its veth: setting it down cuts the host off. */
  hostIf: string;
}

/** A set of namespace hosts on one bridge. */
export interface HostNetwork {
  hosts: NetHost[];
  /** The root namespace's address on the bridge: what the hosts dial to reach the head and slurmctld. */
  gateway: string;
  bridge: string;
  /** The host called `name` (throws on an unknown name). */
  host(name: string): NetHost;
  /** The argv prefix that runs a program inside host `name` (it execs in place: the pid is the program's). */
  exec(name: string): string[];
  /** Cuts host `name` off the network (its veth goes down; nothing is reset). */
  cut(name: string): void;
  /** Reconnects host `name`. */
  restore(name: string): void;
  /** Removes the namespaces, veths and bridge; idempotent. Processes must be gone first. */
  close(): void;
}

function ip(args: string[]): string {
  return execFileSync(IP, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 10_000 });
}

/** Installs Debian's iproute2 when `ip` is missing (root only). */
function ensureIproute2(): void {
  if (existsSync(IP)) return;
  execFileSync("apt-get", ["install", "-y", "-o", "DPkg::Lock::Timeout=600", "iproute2"], { stdio: "ignore", timeout: 600_000 });
}

let support: { ok: true } | { ok: false; reason: string } | undefined;

/**
 * Whether namespaces can be made here: root, iproute2, and a real
 * `ip netns add` + veth (which a container without CAP_SYS_ADMIN or
 * CAP_NET_ADMIN refuses). Probed once; the reason names what failed.
 */
export function netnsSupport(): { ok: true } | { ok: false; reason: string } {
  if (support) return support;
  if (process.platform !== "linux") return (support = { ok: false, reason: `network namespaces need Linux (this is ${process.platform})` });
  if (process.getuid?.() !== 0) return (support = { ok: false, reason: `network namespaces need root (uid is ${process.getuid?.()})` });
  try {
    ensureIproute2();
  } catch (err) {
    return (support = { ok: false, reason: `iproute2 is missing and apt-get install iproute2 failed: ${(err as Error).message}` });
  }
  const probe = `hearth-probe-${randomBytes(3).toString("hex")}`;
  try {
    ip(["netns", "add", probe]);
    ip(["-n", probe, "link", "add", "pv0", "type", "veth", "peer", "name", "pv1"]);
    support = { ok: true };
  } catch (err) {
    const stderr = String((err as { stderr?: unknown }).stderr ?? (err as Error).message).trim();
    support = { ok: false, reason: `'ip netns add' or a veth pair is refused here (${stderr}); CAP_SYS_ADMIN and CAP_NET_ADMIN are needed` };
  } finally {
    try {
      ip(["netns", "del", probe]);
    } catch {
      // The add failed: nothing to remove.
    }
  }
  return support;
}

/** Picks a 10.213.X.0/24 no interface of this machine uses. */
function freeSubnet(): string {
  const used = ip(["-4", "-o", "addr"]);
  for (let tries = 0; tries < 64; tries++) {
    const x = 1 + (randomBytes(1)[0]! % 250);
    const prefix = `10.213.${x}`;
    if (!used.includes(` ${prefix}.`)) return prefix;
  }
  throw new Error("netns harness: no free 10.213.X.0/24 subnet");
}

/** Creates one namespace per name, each at its own address on a new bridge. Throws (after cleaning up) when any step fails. */
export function createHostNetwork(names: string[]): HostNetwork {
  const ok = netnsSupport();
  if (!ok.ok) throw new Error(`netns harness: ${ok.reason}`);
  const tag = randomBytes(3).toString("hex");
  const prefix = freeSubnet();
  const bridge = `hb${tag}`;
  const gateway = `${prefix}.1`;
  const hosts: NetHost[] = names.map((name, i) => ({ name, ns: `hearth-${tag}-${name}`, addr: `${prefix}.${i + 2}`, hostIf: `hv${tag}${i}` }));
  let closed = false;
  const net: HostNetwork = {
    hosts,
    gateway,
    bridge,
    host(name) {
      const h = hosts.find((x) => x.name === name);
      if (!h) throw new Error(`netns harness: no host '${name}' (hosts: ${names.join(", ")})`);
      return h;
    },
    exec(name) {
      // nsenter enters the network namespace only. `ip netns exec` would also
      // remount /sys for it, hiding /sys/fs/cgroup, and slurmd then refuses to start.
      return ["/usr/bin/nsenter", `--net=/run/netns/${net.host(name).ns}`, "--"];
    },
    cut(name) {
      ip(["link", "set", net.host(name).hostIf, "down"]);
    },
    restore(name) {
      ip(["link", "set", net.host(name).hostIf, "up"]);
    },
    close() {
      if (closed) return;
      closed = true;
      for (const h of hosts) {
        for (const args of [["netns", "del", h.ns], ["link", "del", h.hostIf]]) {
          try {
            ip(args);
          } catch {
            // Not created, or already gone with its namespace.
          }
        }
      }
      try {
        ip(["link", "del", bridge]);
      } catch {
        // Not created.
      }
    },
  };
  try {
    ip(["link", "add", bridge, "type", "bridge"]);
    ip(["addr", "add", `${gateway}/24`, "dev", bridge]);
    ip(["link", "set", bridge, "up"]);
    for (const h of hosts) {
      ip(["netns", "add", h.ns]);
      ip(["link", "add", h.hostIf, "type", "veth", "peer", "name", "eth0", "netns", h.ns]);
      ip(["link", "set", h.hostIf, "master", bridge, "up"]);
      ip(["-n", h.ns, "addr", "add", `${h.addr}/24`, "dev", "eth0"]);
      ip(["-n", h.ns, "link", "set", "eth0", "up"]);
      ip(["-n", h.ns, "link", "set", "lo", "up"]);
      ip(["-n", h.ns, "route", "add", "default", "via", gateway]);
    }
  } catch (err) {
    net.close();
    throw err;
  }
  return net;
}
