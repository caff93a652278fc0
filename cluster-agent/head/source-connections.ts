/**
 * How many TCP connections one source address holds to a local port, read
 * from the kernel's tables (/proc/net/tcp and tcp6, Linux). The head's gate
 * (sdk/wire/zap.ts) asks it for each new connection to cap connections per
 * source: ZeroMQ tells a ROUTER neither a connection's peer nor when that
 * peer's connection ends, but the kernel knows both. Established
 * connections count, whatever their state in ZeroMQ: a peer's silent
 * connections still in the ZeroMQ handshake count against it too.
 */
import { readFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";

const ESTABLISHED = "01";

/** Connections from `address` (an IPv4 or IPv6 address) to local TCP `port`; undefined where the kernel tables cannot be read (not Linux). */
export function connectionsFrom(address: string, port: number): number | undefined {
  const want = addressBytes(address);
  if (!want) return undefined;
  let n = 0;
  let readAny = false;
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "latin1");
    } catch {
      continue;
    }
    readAny = true;
    for (const line of text.split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 4 || cols[3] !== ESTABLISHED) continue;
      const [localHex, localPort] = cols[1]!.split(":");
      const [remoteHex] = cols[2]!.split(":");
      if (parseInt(localPort ?? "", 16) !== port || localHex === undefined || remoteHex === undefined) continue;
      const remote = kernelAddress(remoteHex);
      if (remote && remote.equals(want)) n++;
    }
  }
  return readAny ? n : undefined;
}

const LITTLE_ENDIAN = os.endianness() === "LE";

/** An address as 4 bytes (IPv4, also when written as an IPv4-mapped IPv6 address) or 16 bytes. */
function addressBytes(address: string): Buffer | undefined {
  if (net.isIPv4(address)) return Buffer.from(address.split(".").map(Number));
  if (!net.isIPv6(address)) return undefined;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return Buffer.from(mapped[1]!.split(".").map(Number));
  const [head, tail] = address.includes("::") ? address.split("::") : [address, undefined];
  const groups = (s: string | undefined): string[] => (s ? s.split(":") : []);
  const h = groups(head);
  const t = groups(tail);
  const all = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill("0"), ...t];
  const out = Buffer.alloc(16);
  all.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

/** A kernel table's address: 8 hex digits (IPv4) or 32 (IPv6), each 32-bit word in host order. */
function kernelAddress(hex: string): Buffer | undefined {
  if (hex.length !== 8 && hex.length !== 32) return undefined;
  const out = Buffer.alloc(hex.length / 2);
  for (let w = 0; w < hex.length / 8; w++) {
    const word = Buffer.from(hex.slice(w * 8, w * 8 + 8), "hex");
    out.writeUInt32BE(LITTLE_ENDIAN ? word.readUInt32LE(0) : word.readUInt32BE(0), w * 4);
  }
  // An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is the IPv4 address.
  if (out.length === 16 && out.subarray(0, 10).every((b) => b === 0) && out[10] === 0xff && out[11] === 0xff) return out.subarray(12);
  return out;
}
