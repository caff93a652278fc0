/**
 * Who may join the head, and as what. Each peer proves a key derived from the
 * cluster secret for one role and identity (sdk/wire/auth.ts); the head
 * dispatches on that proven role, never on the shape of a routing id:
 *
 * - admin: any app as a driver, plus `shutdown` and status of every app;
 * - driver: the one app its credential names (hello, calls, objects, status);
 * - agent: registers, heartbeats, reserves ports, and reports the start
 *   failures and exits of the executors the head placed on it, nothing else;
 * - executor: answers the calls routed to it and reads its own app's objects;
 *   its key names its app and id, so it cannot pose as another executor.
 */
import { deriveKey, type Role } from "../../sdk/wire/auth.js";

/** The key a peer claiming (role, id, app) must prove at the head, or why it may not join. */
export function peerKey(secret: Buffer, role: Role, id: string, app: string): Buffer | string {
  switch (role) {
    case "admin":
      return app === "" ? deriveKey(secret, "admin", id, "") : "an admin credential names no app";
    case "driver":
      return app !== "" && id === app ? deriveKey(secret, "driver", id, app) : "a driver credential names one app (its id and app are the app's name)";
    case "agent":
      return app === "" ? deriveKey(secret, "agent", id, "") : "an agent credential names no app";
    case "executor":
      return app !== "" ? deriveKey(secret, "executor", id, app) : "an executor credential names its app";
  }
}
