/**
 * The RL layer's errors, each naming what failed: an option (its flag and
 * value), a run (its name and step), a reward function (the step, the sample
 * and its question), an environment (its name, the sample and the call).
 */
import { HearthError } from "../errors/index.js";

/** A run option (a CLI flag, an SDK field) has a value the run cannot take. */
export class OptionError extends HearthError {
  override name = "OptionError";
  /** The flag as the CLI spells it (`--max-lag`). */
  declare readonly flag: string;
  constructor(message: string, fields: { flag: string; cause?: unknown }) {
    super(message, { cause: fields.cause }, { flag: fields.flag });
  }
}

/** A run cannot go on (or start) as asked: which run, and at which step. */
export class RunError extends HearthError {
  override name = "RunError";
  declare readonly run: string;
  declare readonly step?: number;
  constructor(message: string, fields: { run: string; step?: number; cause?: unknown }) {
    super(message, { cause: fields.cause }, { run: fields.run, step: fields.step });
  }
}

/** A reward function threw, or returned something that is not a finite number, or was given what it cannot score. */
export class RewardError extends HearthError {
  override name = "RewardError";
  declare readonly step?: number;
  /** The sample's index in its group, and the group's question (when a batch was being scored). */
  declare readonly sample?: number;
  declare readonly question?: string;
  constructor(message: string, fields: { step?: number; sample?: number; question?: string; cause?: unknown } = {}) {
    super(message, { cause: fields.cause }, { step: fields.step, sample: fields.sample, question: fields.question });
  }
}

/** Something in an environment's code failed: which environment, which sample, which call. */
export class EnvironmentError extends HearthError {
  override name = "EnvironmentError";
  declare readonly environment: string;
  declare readonly sample?: string;
  declare readonly call?: string;
  constructor(message: string, fields: { environment: string; sample?: string; call?: string; cause?: unknown }) {
    super(message, { cause: fields.cause }, { environment: fields.environment, sample: fields.sample, call: fields.call });
  }
}

/** A trajectory is not what its engine sampled (its trained ids differ from the sampled ones): which sample. */
export class TrajectoryError extends HearthError {
  override name = "TrajectoryError";
  declare readonly sample?: string;
  constructor(message: string, fields: { sample?: string; cause?: unknown } = {}) {
    super(message, { cause: fields.cause }, { sample: fields.sample });
  }
}
