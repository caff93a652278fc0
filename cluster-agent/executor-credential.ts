/**
 * An executor's identity on the wire: the routing id and the credential its
 * agent handed it at start (HEARTH_EXECUTOR_ROUTING_ID, HEARTH_EXECUTOR_TOKEN).
 * The token is this executor's own key (derived from the cluster secret for
 * its app and id); the executor never sees the secret.
 */
import { randomBytes } from "node:crypto";
import { EXECUTOR_TOKEN_ENV, type Credential } from "../sdk/wire/auth.js";
import { AuthError } from "../sdk/wire/errors.js";

/** Reads the executor's routing id and credential from its environment; a clear error when the agent gave none. */
export function executorCredential(launch: { executorId: string; app: string }, env: NodeJS.ProcessEnv = process.env): { routingId: string; credential: Credential } {
  const token = env[EXECUTOR_TOKEN_ENV];
  if (!token || !/^[0-9a-f]{64}$/.test(token)) {
    throw new AuthError(`executor ${launch.executorId} has no credential (${EXECUTOR_TOKEN_ENV} must be 64 hex digits); executors are started by an agent, which sets it`);
  }
  const routingId = env.HEARTH_EXECUTOR_ROUTING_ID || `x.${launch.executorId}.${randomBytes(12).toString("hex")}`;
  return { routingId, credential: { role: "executor", id: launch.executorId, app: launch.app, key: Buffer.from(token, "hex") } };
}
