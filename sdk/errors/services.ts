/**
 * Errors about declaring and starting services: a bad resource request or
 * option, a service that does not exist, executors that could not start, and
 * a gang that lost a member. Each names the service (and the executor, rank
 * or resreq) it is about.
 */
import { HearthError, type ErrorOptions } from "./hearth-error.js";

/** A resource request string (`"cpu=8,mem=64g,gpu=1"`) is malformed or can never be satisfied. */
export class ResreqError extends HearthError {
  override name = "ResreqError";
  /** The resource request text as given. */
  declare readonly resreq: string;
  /** The service that asked for it, when the head refused a declaration. */
  declare readonly service?: string;
  constructor(message: string, fields: { resreq: string; service?: string } & ErrorOptions) {
    super(message, fields, { resreq: fields.resreq, service: fields.service });
  }
}

/** A service declaration or option is invalid (bad module, export, warmup, max…). */
export class ServiceConfigError extends HearthError {
  override name = "ServiceConfigError";
  /** The service the declaration was for, when known. */
  declare readonly service?: string;
  /** The declaration's field that is out of bounds (warmup, idleTimeout, module…), when one is. */
  declare readonly field?: string;
  constructor(message: string, fields: { service?: string; field?: string } & ErrorOptions = {}) {
    super(message, fields, { service: fields.service, field: fields.field });
  }
}

/** A named service does not exist (or no longer exists) in the app. */
export class ServiceNotFoundError extends HearthError {
  override name = "ServiceNotFoundError";
  /** The service name or id that was asked for. */
  declare readonly service: string;
  /** The app it was looked up in. */
  declare readonly app?: string;
  constructor(message: string, fields: { service: string; app?: string } & ErrorOptions) {
    super(message, fields, { service: fields.service, app: fields.app });
  }
}

/**
 * A service's executors could not start (init threw, the module failed to
 * load, init passed its timeout…). When user code threw, `cause` is the
 * RemoteError with its remote stack.
 */
export class ServiceStartError extends HearthError {
  override name = "ServiceStartError";
  /** The service that failed to start. */
  declare readonly service: string;
  /** The executor that failed, when one did (not when a gang's rendezvous could not be set up). */
  declare readonly executorId?: string;
  constructor(message: string, fields: { service: string; executorId?: string } & ErrorOptions) {
    super(message, fields, { service: fields.service, executorId: fields.executorId });
  }
}

/** A gang lost a member; the whole gang fails and can be declared again. */
export class GangFailedError extends HearthError {
  override name = "GangFailedError";
  /** The gang (service) name. */
  declare readonly service: string;
  /** The rank that was lost (the first one, when several were). */
  declare readonly rank: number;
  /** The executor that held that rank, when it is known. */
  declare readonly executorId?: string;
  constructor(message: string, fields: { service: string; rank: number; executorId?: string } & ErrorOptions) {
    super(message, fields, { service: fields.service, rank: fields.rank, executorId: fields.executorId });
  }
}
