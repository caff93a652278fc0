/**
 * Errors of the head and agent processes themselves (not of one service or
 * call): a state file that cannot be read back, an agent that failed (or did
 * not answer) a request from the head, and a bad command-line setting.
 */
import { HearthError, type ErrorOptions } from "./hearth-error.js";

/** The head's state file (persist.ts) is unreadable or not one the head wrote. */
export class StateFileError extends HearthError {
  override name = "StateFileError";
  /** The state file's path. */
  declare readonly file: string;
  constructor(message: string, fields: { file: string } & ErrorOptions) {
    super(message, fields, { file: fields.file });
  }
}

/** A request the head sent an agent (e.g. `reserve-port`) failed there or got no answer in time. */
export class AgentRequestError extends HearthError {
  override name = "AgentRequestError";
  declare readonly agentId: string;
  /** The request op. */
  declare readonly op: string;
  constructor(message: string, fields: { agentId: string; op: string } & ErrorOptions) {
    super(message, fields, { agentId: fields.agentId, op: fields.op });
  }
}

/** A command-line flag (or the environment variable standing for it) has a value hearth cannot use. */
export class UsageError extends HearthError {
  override name = "UsageError";
  /** The flag, e.g. `--gpus`. */
  declare readonly flag: string;
  constructor(message: string, fields: { flag: string } & ErrorOptions) {
    super(message, fields, { flag: fields.flag });
  }
}

/** An agent could not fetch or unpack a service's project (its code and dependencies) for an executor. */
export class ProjectSetupError extends HearthError {
  override name = "ProjectSetupError";
  /** The project's content hash. */
  declare readonly project: string;
  declare readonly agentId: string;
  /** The executor that was to run it. */
  declare readonly executorId: string;
  constructor(message: string, fields: { project: string; agentId: string; executorId: string } & ErrorOptions) {
    super(message, fields, { project: fields.project, agentId: fields.agentId, executorId: fields.executorId });
  }
}
