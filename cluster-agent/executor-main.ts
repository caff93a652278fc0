/**
 * Entry point of an executor process, started by an agent with its launch
 * context in the environment.
 */
import { runExecutor, type ExecutorLaunch } from "./executor-host.js";

const head = process.env.HEARTH_HEAD;
const context = process.env.HEARTH_EXECUTOR_CONTEXT;
if (!head || !context) {
  console.error("executor-main is started by `hearth agent`; HEARTH_HEAD and HEARTH_EXECUTOR_CONTEXT must be set");
  process.exit(2);
}
await runExecutor(head, JSON.parse(context) as ExecutorLaunch, process.env.HEARTH_AGENT_CACHE);
