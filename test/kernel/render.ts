/**
 * Renders an executed notebook the way a reader sees it: nbconvert's HTML
 * export, opened in headless Chromium (offline: every script must be
 * inlined), screenshotted, and the PNG checked to be non-blank.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { inflateSync } from "node:zlib";
import { PYTHON } from "./bridge.js";

/** Debian's Chromium, if installed. */
export const CHROMIUM = process.env.HEARTH_CHROMIUM ?? "/usr/bin/chromium";

const CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--hide-scrollbars", "--virtual-time-budget=15000"];

function run(cmd: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 256 * 1024 * 1024, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(" ")} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** Exports `ipynb` to `<outDir>/<name>.html` with nbconvert; returns the HTML path. */
export async function exportHtml(ipynb: string, outDir: string): Promise<string> {
  const name = path.basename(ipynb, ".ipynb");
  await run(PYTHON, ["-m", "nbconvert", "--to", "html", "--output-dir", outDir, "--output", name, ipynb], 120_000);
  const html = path.join(outDir, `${name}.html`);
  if (!existsSync(html)) throw new Error(`nbconvert wrote no ${html}`);
  return html;
}

/** The DOM of `html` after its scripts ran (Chromium --dump-dom). */
export function renderedDom(html: string): Promise<string> {
  return run(CHROMIUM, [...CHROMIUM_FLAGS, "--dump-dom", pathToFileURL(html).href], 120_000);
}

/** Screenshots `html` into `png` at `width`×`height`. */
export async function screenshot(html: string, png: string, width = 1200, height = 4000): Promise<void> {
  await run(CHROMIUM, [...CHROMIUM_FLAGS, `--window-size=${width},${height}`, `--screenshot=${png}`, pathToFileURL(html).href], 120_000);
  if (!existsSync(png)) throw new Error(`chromium wrote no ${png}`);
}

/** Size, share of non-white pixels and number of distinct colors of an 8-bit RGB/RGBA PNG. */
export function pngStats(file: string): { width: number; height: number; nonWhite: number; colors: number } {
  const buf = readFileSync(file);
  if (!buf.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) throw new Error(`${file} is not a PNG`);
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat: Buffer[] = [];
  for (let at = 8; at < buf.length; ) {
    const len = buf.readUInt32BE(at);
    const type = buf.toString("ascii", at + 4, at + 8);
    const data = buf.subarray(at + 8, at + 8 + len);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const [depth, colorType, , , interlace] = [data[8], data[9], data[10], data[11], data[12]];
      if (depth !== 8 || (colorType !== 2 && colorType !== 6) || interlace !== 0) throw new Error(`unsupported PNG: depth ${depth}, color type ${colorType}, interlace ${interlace}`);
      channels = colorType === 6 ? 4 : 3;
    } else if (type === "IDAT") idat.push(data);
    at += 12 + len;
  }
  // Undo the per-row filters (PNG spec §9): none, sub, up, average, Paeth.
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const px = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    const src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? px[y * stride + x - channels]! : 0;
      const b = y > 0 ? px[(y - 1) * stride + x]! : 0;
      const c = x >= channels && y > 0 ? px[(y - 1) * stride + x - channels]! : 0;
      let pred = 0;
      if (filter === 1) pred = a;
      else if (filter === 2) pred = b;
      else if (filter === 3) pred = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const [pa, pb, pc] = [Math.abs(p - a), Math.abs(p - b), Math.abs(p - c)];
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      px[y * stride + x] = (src[x]! + pred) & 0xff;
    }
  }
  let nonWhite = 0;
  const colors = new Set<number>();
  for (let i = 0; i < px.length; i += channels) {
    const rgb = (px[i]! << 16) | (px[i + 1]! << 8) | px[i + 2]!;
    if (rgb !== 0xffffff) nonWhite++;
    if (colors.size < 10_000) colors.add(rgb);
  }
  return { width, height, nonWhite: nonWhite / (width * height), colors: colors.size };
}
