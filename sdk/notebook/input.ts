/**
 * Reading a line from the person at the notebook: `await input("name? ")`
 * and `await password("token: ")`. In the hearth kernel this is Jupyter's
 * stdin channel (input_request / input_reply), allowed only when the front
 * end said so in its execute_request (`allow_stdin`: JupyterLab and the
 * classic notebook do; nbclient and other batch runners do not, and then
 * input() fails at once with StdinNotAllowedError instead of waiting). An
 * interrupt (the stop button) ends the wait. Outside a notebook the line is
 * read from this process's stdin.
 */
import { createInterface } from "node:readline";
import { displaySink } from "./display.js";

/** Options of input(). */
export interface InputOptions {
  /** Hide what is typed (the front end shows a password field). */
  password?: boolean;
  /** Give up after this long (rejects with InputTimeoutError); default: wait until answered or interrupted. */
  timeoutMs?: number;
  /**
   * The answer when nobody can give one: the front end does not take input
   * for this cell (nbclient, batch runs) or stdin ended. input() then
   * resolves with it instead of failing with StdinNotAllowedError, so a
   * notebook that asks a person still runs unattended. An interrupt or a
   * timeout still rejects.
   */
  default?: string;
}

/** The front end does not accept input for this cell (allow_stdin false, e.g. nbclient), or no cell is running. */
export class StdinNotAllowedError extends Error {
  override name = "StdinNotAllowedError";
}

/** No answer came within InputOptions.timeoutMs. */
export class InputTimeoutError extends Error {
  override name = "InputTimeoutError";
}

/** Asks for one line of input; resolves with it (without the newline). */
export async function input(prompt = "", opts: InputOptions = {}): Promise<string> {
  const sink = displaySink();
  const asked = sink?.input ? sink.input(prompt, opts.password ?? false) : readLine(prompt, opts.password ?? false);
  const fallback = opts.default;
  const answer = fallback === undefined ? asked : asked.catch((err: unknown) => (err instanceof StdinNotAllowedError ? fallback : Promise.reject(err)));
  if (opts.timeoutMs === undefined) return answer;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new InputTimeoutError(`input(${JSON.stringify(prompt)}): no answer within ${opts.timeoutMs} ms`)), opts.timeoutMs);
  });
  try {
    return await Promise.race([answer, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Asks for a secret: like input(), but what is typed is not shown. */
export function password(prompt = "Password: ", opts: Omit<InputOptions, "password"> = {}): Promise<string> {
  return input(prompt, { ...opts, password: true });
}

/** One line from process.stdin; on a terminal a password is read with echo off. */
function readLine(prompt: string, hidden: boolean): Promise<string> {
  const stdin = process.stdin;
  if (hidden && stdin.isTTY) {
    return new Promise((resolve, reject) => {
      process.stdout.write(prompt);
      let line = "";
      stdin.setRawMode(true);
      stdin.resume();
      const onData = (chunk: Buffer) => {
        for (const ch of chunk.toString("utf8")) {
          if (ch === "\r" || ch === "\n" || ch === "\u0003") {
            stdin.setRawMode(false);
            stdin.pause();
            stdin.off("data", onData);
            process.stdout.write("\n");
            if (ch === "\u0003") reject(new Error("input interrupted (Ctrl-C)"));
            else resolve(line);
            return;
          }
          line = ch === "\u007f" ? line.slice(0, -1) : line + ch;
        }
      };
      stdin.on("data", onData);
    });
  }
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: stdin, output: process.stdout, terminal: false });
    let answered = false;
    process.stdout.write(prompt);
    rl.once("line", (line) => {
      answered = true;
      rl.close();
      resolve(line);
    });
    rl.once("close", () => {
      if (!answered) reject(new StdinNotAllowedError(`input(${JSON.stringify(prompt)}): stdin ended before a line was read`));
    });
  });
}
