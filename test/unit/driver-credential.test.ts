/**
 * Which credential a driver proves (sdk/wire/auth.ts driverCredential): an
 * app token in HEARTH_APP_TOKEN wins over a HEARTH_HOME that holds the
 * cluster secret (every provisioner names its home, so a token that lost to
 * it would never be used); without a token the key comes from that home's
 * secret; admin always needs the secret; a malformed token is a clear error.
 */
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { APP_TOKEN_ENV, appToken, deriveKey, driverCredential, ensureSecret } from "../../sdk/wire/auth.js";
import { AuthError } from "../../sdk/wire/errors.js";

const home = mkdtempSync(path.join(os.tmpdir(), "hearth-cred-"));
const secret = ensureSecret(path.join(home, "secret"));

test("HEARTH_APP_TOKEN is what a driver proves, even where the home holds the secret", () => {
  const token = appToken(secret, "someone-else");
  const c = driverCredential("victim", { home, env: { [APP_TOKEN_ENV]: token } });
  assert.deepEqual(c, { role: "driver", id: "victim", app: "victim", key: Buffer.from(token, "hex") }, "the token's key, claimed for the app asked for (the head then refuses a mismatch)");
  assert.notDeepEqual(c.key, deriveKey(secret, "driver", "victim", "victim"), "not the key the secret would give");
});

test("without a token the key is derived from the home's secret; admin always is", () => {
  assert.deepEqual(driverCredential("mine", { home, env: {} }).key, deriveKey(secret, "driver", "mine", "mine"));
  const admin = driverCredential("mine", { home, admin: true, env: { [APP_TOKEN_ENV]: appToken(secret, "x") } });
  assert.equal(admin.role, "admin");
  assert.deepEqual(admin.key, deriveKey(secret, "admin", "mine", ""), "admin from the secret, never the token");
});

test("a token that is not 64 hex digits is refused, saying what it must be", () => {
  assert.throws(() => driverCredential("mine", { home, env: { [APP_TOKEN_ENV]: "abc" } }), (err: Error) => err instanceof AuthError && /HEARTH_APP_TOKEN must be 64 hex digits/.test(err.message));
});
