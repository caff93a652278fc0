/**
 * Errors of the head and agent processes themselves (not of one service or
 * call): a state file that cannot be read back, an agent that failed (or did
 * not answer) a request from the head, and a bad command-line setting.
 */
import { HearthError, type ErrorIds, type ErrorOptions } from "./hearth-error.js";

/** The head's state file (persist.ts) is unreadable or not one the head wrote. */
export class StateFileError extends HearthError {
  override name = "StateFileError";
  /** The state file's path. */
  readonly file: string;
  constructor(message: string, fields: { file: string } & ErrorOptions) {
    super(message, fields);
    this.file = fields.file;
  }
  override ids(): ErrorIds {
    return { file: this.file };
  }
}

/** A request the head sent an agent (e.g. `reserve-port`) failed there or got no answer in time. */
export class AgentRequestError extends HearthError {
  override name = "AgentRequestError";
  readonly agentId: string;
  /** The request op. */
  readonly op: string;
  constructor(message: string, fields: { agentId: string; op: string } & ErrorOptions) {
    super(message, fields);
    this.agentId = fields.agentId;
    this.op = fields.op;
  }
  override ids(): ErrorIds {
    return { agentId: this.agentId, op: this.op };
  }
}

/** A command-line flag (or the environment variable standing for it) has a value hearth cannot use. */
export class UsageError extends HearthError {
  override name = "UsageError";
  /** The flag, e.g. `--gpus`. */
  readonly flag: string;
  constructor(message: string, fields: { flag: string } & ErrorOptions) {
    super(message, fields);
    this.flag = fields.flag;
  }
  override ids(): ErrorIds {
    return { flag: this.flag };
  }
}

/** An agent could not fetch or unpack a service's project (its code and dependencies) for an executor. */
export class ProjectSetupError extends HearthError {
  override name = "ProjectSetupError";
  /** The project's content hash. */
  readonly project: string;
  readonly agentId: string;
  /** The executor that was to run it. */
  readonly executorId: string;
  constructor(message: string, fields: { project: string; agentId: string; executorId: string } & ErrorOptions) {
    super(message, fields);
    this.project = fields.project;
    this.agentId = fields.agentId;
    this.executorId = fields.executorId;
  }
  override ids(): ErrorIds {
    return { project: this.project, agentId: this.agentId, executorId: this.executorId };
  }
}
