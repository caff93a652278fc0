/**
 * `hearth kernel …`: install or remove the Jupyter kernelspec, and run the
 * kernel (what kernel.json's argv starts).
 */
import { parseArgs } from "node:util";
import { installKernel, uninstallKernel } from "./install.js";
import { runKernel } from "./kernel.js";

const USAGE = `usage: hearth kernel <command>

commands:
  install   [--user | --prefix DIR] [--name NAME]   write the kernelspec (JUPYTER_PATH=DIR/share/jupyter for a prefix)
  uninstall [--user | --prefix DIR] [--name NAME]   remove it
  run       --connection-file FILE                  run the kernel (Jupyter starts this)
`;

/** Runs `hearth kernel <args>`; resolves with the exit code (for `run`, when the kernel shuts down). */
export async function runKernelCommand(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  switch (command) {
    case "install":
    case "uninstall": {
      const { values } = parseArgs({ args: rest, options: { user: { type: "boolean" }, prefix: { type: "string" }, name: { type: "string" } } });
      if (values.user && values.prefix) {
        console.error("hearth kernel: --user and --prefix exclude each other");
        return 2;
      }
      if (command === "install") {
        console.log(`installed kernelspec in ${installKernel(values)}`);
        return 0;
      }
      const dir = uninstallKernel(values);
      console.log(dir ? `removed ${dir}` : "no kernelspec installed there");
      return dir ? 0 : 1;
    }
    case "run": {
      const { values } = parseArgs({ args: rest, options: { "connection-file": { type: "string", short: "f" } } });
      if (!values["connection-file"]) {
        console.error(`hearth kernel run needs --connection-file\n\n${USAGE}`);
        return 2;
      }
      return runKernel({ connectionFile: values["connection-file"] });
    }
    case undefined:
    case "help":
    case "--help":
      console.log(USAGE);
      return command === undefined ? 2 : 0;
    default:
      console.error(`unknown kernel command '${command}'\n\n${USAGE}`);
      return 2;
  }
}
