/**
 * Drives test/kernel/jupyter_bridge.py (Debian's jupyter_client) from node
 * tests: one JSON request per line, one answer per line, each with a timeout.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface, type Interface } from "node:readline";
import { fileURLToPath } from "node:url";
import { installKernel } from "../../kernel/install.js";

/** The repository root (this file runs from dist/test/kernel/). */
export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** Debian's python3, the only one that sees jupyter_client. */
export const PYTHON = process.env.HEARTH_JUPYTER_PYTHON ?? "/usr/bin/python3";

/** One iopub message of a request. */
export interface Output {
  msg_type: string;
  content: Record<string, any>;
}

/** The reply and iopub outputs of an execute_request. */
export interface Executed {
  reply: Record<string, any>;
  outputs: Output[];
}

/** A kernelspec installed under a temporary prefix; JUPYTER_PATH is `jupyterPath`. */
export class TempKernelspec {
  readonly prefix = mkdtempSync(path.join(tmpdir(), "hearth-kernelspec-"));
  readonly jupyterPath = path.join(this.prefix, "share", "jupyter");
  readonly name = "hearth-test";

  constructor() {
    installKernel({ prefix: this.prefix, name: this.name });
  }

  remove(): void {
    rmSync(this.prefix, { recursive: true, force: true });
  }
}

/** A jupyter_client process connected to one kernel. */
export class JupyterBridge {
  private readonly lines: Interface;
  private readonly pending: Array<(line: string) => void> = [];
  private stderr = "";

  private constructor(private readonly child: ChildProcessWithoutNullStreams) {
    this.lines = createInterface({ input: child.stdout });
    this.lines.on("line", (line) => this.pending.shift()?.(line));
    child.stderr.on("data", (d: Buffer) => (this.stderr += d.toString()));
  }

  /** Starts the client and a kernel from `spec`, in `cwd`. */
  static async start(spec: TempKernelspec, cwd: string = REPO_ROOT, timeoutS = 30): Promise<{ bridge: JupyterBridge; startup: Record<string, any> }> {
    const child = spawn(PYTHON, [path.join(REPO_ROOT, "test", "kernel", "jupyter_bridge.py")], { stdio: ["pipe", "pipe", "pipe"] });
    const bridge = new JupyterBridge(child);
    const startup = await bridge.request({ op: "start", jupyter_path: spec.jupyterPath, kernel_name: spec.name, cwd, timeout: timeoutS });
    return { bridge, startup };
  }

  /** Sends one request; rejects if the answer is an error or does not come within timeout + 10 s. */
  request(req: Record<string, unknown> & { op: string; timeout?: number }): Promise<Record<string, any>> {
    const limitMs = ((req.timeout ?? 30) + 10) * 1000;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`bridge: no answer to ${req.op} within ${limitMs} ms; stderr: ${this.stderr}`)), limitMs);
      this.pending.push((line) => {
        clearTimeout(timer);
        const answer = JSON.parse(line) as Record<string, any>;
        if (answer.ok) resolve(answer);
        else reject(new Error(`bridge ${req.op}: ${answer.error}\n${answer.trace}\nstderr: ${this.stderr}`));
      });
      this.child.stdin.write(JSON.stringify(req) + "\n");
    });
  }

  /** Runs a cell and returns its reply and outputs. */
  async execute(code: string, timeout = 30): Promise<Executed> {
    return (await this.request({ op: "execute", code, timeout })) as unknown as Executed;
  }

  /** Shuts the kernel down through the protocol, then ends the client. */
  async close(): Promise<Record<string, any>> {
    const answer = await this.request({ op: "shutdown", timeout: 10 });
    this.child.stdin.end();
    await new Promise((resolve) => (this.child.exitCode !== null ? resolve(null) : this.child.once("exit", resolve)));
    return answer;
  }

  /** Kills the client (and with it, eventually, the kernel) without a protocol shutdown. */
  kill(): void {
    this.child.kill("SIGKILL");
  }
}

/** The outputs of one msg_type. */
export function outputsOf(executed: Executed, msgType: string): Array<Record<string, any>> {
  return executed.outputs.filter((o) => o.msg_type === msgType).map((o) => o.content);
}

/** All stream text of one stream name. */
export function streamText(executed: Executed, name: "stdout" | "stderr" = "stdout"): string {
  return outputsOf(executed, "stream").filter((c) => c.name === name).map((c) => c.text as string).join("");
}
