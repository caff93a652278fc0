/**
 * A real Jupyter front end for the browser tests: Debian's Jupyter Notebook
 * 6 (`/usr/bin/jupyter-notebook`) serving a folder, with the hearth
 * kernelspec on its JUPYTER_PATH, its own config, data and runtime folders
 * (nothing of the user's), a token, and a port of its own; and headless
 * Chromium (Debian's, driven by playwright-core; no browser is downloaded)
 * in a fresh profile.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium, type BrowserContext } from "playwright-core";
import { CHROMIUM } from "./render.js";

/** Debian's Jupyter Notebook 6. */
export const JUPYTER_NOTEBOOK = process.env.HEARTH_JUPYTER_NOTEBOOK ?? "/usr/bin/jupyter-notebook";

/** Why the browser tests cannot run here, or false when they can. */
export function browserSkip(): string | false {
  if (!existsSync(CHROMIUM)) return `no ${CHROMIUM} (apt-get install chromium)`;
  if (!existsSync(JUPYTER_NOTEBOOK)) return `no ${JUPYTER_NOTEBOOK} (apt-get install jupyter-notebook)`;
  return false;
}

/** Chromium's flags: headless, no sandbox (root in CI), nothing fetched from the network in the background. */
export const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** A free TCP port on loopback (bound and released: the server binds it next). */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** A running Notebook 6 server. */
export class NotebookServer {
  private log = "";

  private constructor(
    private readonly child: ChildProcess,
    /** http://127.0.0.1:PORT */
    readonly base: string,
    readonly token: string,
    private readonly state: string,
  ) {
    child.stdout?.on("data", (d: Buffer) => (this.log += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (this.log += d.toString()));
  }

  /**
   * Serves `dir` with the kernelspecs under `jupyterPath`; `env` reaches the
   * kernels it starts (HEARTH_HEAD and the like). Resolves once its API
   * answers (60 s at most).
   */
  static async start(dir: string, jupyterPath: string, env: Record<string, string>): Promise<NotebookServer> {
    const state = mkdtempSync(path.join(tmpdir(), "hearth-nbserver-"));
    for (const d of ["config", "data", "runtime"]) mkdirSync(path.join(state, d));
    const port = await freePort();
    const token = randomBytes(16).toString("hex");
    const args = ["--no-browser", "--ip=127.0.0.1", `--port=${port}`, "--port-retries=0", `--NotebookApp.token=${token}`, "--allow-root", `--notebook-dir=${dir}`, "--NotebookApp.open_browser=False"];
    const child = spawn(JUPYTER_NOTEBOOK, args, {
      env: { ...process.env, ...env, JUPYTER_PATH: jupyterPath, JUPYTER_CONFIG_DIR: path.join(state, "config"), JUPYTER_DATA_DIR: path.join(state, "data"), JUPYTER_RUNTIME_DIR: path.join(state, "runtime") },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const server = new NotebookServer(child, `http://127.0.0.1:${port}`, token, state);
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`jupyter-notebook exited ${child.exitCode}:\n${server.log}`);
      const ok = await fetch(`${server.base}/api/status`, { headers: { Authorization: `token ${token}` } }).then((r) => r.ok, () => false);
      if (ok) return server;
      if (Date.now() > deadline) {
        await server.stop();
        throw new Error(`jupyter-notebook did not answer on ${server.base} within 60 s:\n${server.log}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** The page of notebook `name` (a path under the served folder), logged in by its token. */
  notebookUrl(name: string): string {
    return `${this.base}/notebooks/${encodeURI(name)}?token=${this.token}`;
  }

  /** A REST call to the server (its token in the header, so no XSRF cookie is needed). */
  async api<T>(method: string, route: string, body?: unknown): Promise<T> {
    const res = await fetch(`${this.base}${route}`, { method, headers: { Authorization: `token ${this.token}`, "Content-Type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    if (!res.ok) throw new Error(`${method} ${route}: ${res.status} ${await res.text()}`);
    return (res.status === 204 ? undefined : await res.json()) as T;
  }

  /** What the server printed (for a failing test's message). */
  output(): string {
    return this.log;
  }

  /** Shuts its kernels down and stops it (SIGTERM, then SIGKILL after 10 s). */
  async stop(): Promise<void> {
    if (this.child.exitCode === null) {
      const kernels = await this.api<Array<{ id: string }>>("GET", "/api/kernels").catch(() => []);
      for (const k of kernels) await this.api("DELETE", `/api/kernels/${k.id}`).catch(() => undefined);
      const exited = new Promise<void>((resolve) => this.child.once("exit", () => resolve()));
      this.child.kill("SIGTERM");
      const timer = setTimeout(() => this.child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(this.state, { recursive: true, force: true });
  }
}

/** Headless Chromium in a fresh profile (a new --user-data-dir, removed by `close`). */
export async function launchChromium(): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const profile = mkdtempSync(path.join(tmpdir(), "hearth-chromium-"));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, viewport: { width: 1280, height: 900 } });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
