/**
 * The endpoint's errors, in OpenAI's shape: an HTTP status and
 * `{ "error": { "message", "type", "param", "code" } }`, so that an agent's
 * SDK raises the error class it knows (the `openai` package maps 400 to
 * BadRequestError, 401 to AuthenticationError, 404 to NotFoundError, 429 to
 * RateLimitError) with our message. Every message says what was wrong and
 * what to do.
 */
import { HearthError } from "../../errors/index.js";

/** OpenAI's error types by status. */
const TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "invalid_request_error",
  404: "invalid_request_error",
  405: "invalid_request_error",
  409: "invalid_request_error",
  413: "invalid_request_error",
  429: "rate_limit_exceeded",
  500: "server_error",
  503: "server_error",
  504: "timeout",
};

/** An error the endpoint answers with: its status, the request field it names (`param`) and a code. */
export class EndpointError extends HearthError {
  override name = "EndpointError";
  declare readonly status: number;
  declare readonly param?: string;
  declare readonly code?: string;
  /** Seconds a client should wait before trying again (429, 503). */
  declare readonly retryAfter?: number;
  constructor(status: number, message: string, fields: { param?: string; code?: string; retryAfter?: number; cause?: unknown } = {}) {
    super(message, { cause: fields.cause }, { status, param: fields.param, code: fields.code, retryAfter: fields.retryAfter });
  }

  /** The response body. */
  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: TYPES[this.status] ?? "server_error", param: this.param ?? null, code: this.code ?? null } };
  }
}

/** A 400 naming the bad field. */
export function badRequest(param: string, message: string, code = "invalid_value"): EndpointError {
  return new EndpointError(400, `${param}: ${message}`, { param, code });
}
