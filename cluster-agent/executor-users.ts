/**
 * Who an agent's executors run as. An executor runs the app's code
 * unsandboxed, so whatever its user can read, the app can read: an agent
 * that ran them as itself would hand every app its HEARTH_HOME (the cluster
 * secret, i.e. admin), its state, and the logs and environments of every
 * other app's executors.
 *
 * An agent running as root (the embedded default in CI, a shared node)
 * therefore runs each app's executors as a user of that app alone: uid (and
 * gid) `first + HMAC(secret, app) mod count` from `--executor-uids`
 * (default 2013265920-2080374783, a range no distribution or systemd hands
 * out; the uids need no /etc/passwd entry). One uid per app, not one for
 * all executors: two apps sharing a uid could read each other's
 * /proc/<pid>/environ (their executor tokens) and ptrace each other. The uid
 * is derived, not allocated, so every agent of a cluster on a machine gives
 * an app the same one with no shared state, and two clusters (two secrets)
 * give the same app name different ones.
 *
 * Each app's files live under `<dir>/u<uid>/` (default dir
 * `<tmpdir>/hearth-executors`, root-owned 0711): `projects/` (unpacked by
 * the agent, root-owned, readable by the app's group only: executors read
 * but cannot change them) and `home/` (the executors' HOME, TMPDIR and
 * working folder, owned by the app's uid, 0700: shipped folders and scratch
 * land there). The agent never writes into a folder an executor can write.
 *
 * An agent that is not root cannot change user: its executors share its
 * user (`mode: "shared-user"`), which the agent logs at start, the head's
 * status shows, and docs/architecture.md ("Security model") spells out.
 */
import { createHmac } from "node:crypto";
import { chmodSync, chownSync, lstatSync, mkdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { HearthError } from "../sdk/errors/index.js";

/** A range of user ids: `first` … `first + count - 1`. */
export interface UidRange {
  first: number;
  count: number;
}

/** Default of `--executor-uids` (0x78000000 … 0x7bffffff): above systemd-nspawn's container ranges, below 2^31 (Node's limit for spawn's uid). */
export const DEFAULT_EXECUTOR_UIDS: UidRange = { first: 0x78000000, count: 0x04000000 };

/** The lowest uid `--executor-uids` may name: below it live the system's own users. */
const MIN_EXECUTOR_UID = 1000;
/** The highest uid Node's spawn accepts (an int32). */
const MAX_EXECUTOR_UID = 0x7fffffff - 1;

/** Parses `--executor-uids`: `FIRST-LAST` (inclusive) or `none` (executors share the agent's user). */
export function parseExecutorUids(text: string): UidRange | "none" {
  if (text === "none") return "none";
  const m = /^(\d+)-(\d+)$/.exec(text.trim());
  const first = m ? Number(m[1]) : NaN;
  const last = m ? Number(m[2]) : NaN;
  if (!m || !Number.isSafeInteger(first) || !Number.isSafeInteger(last) || first > last) {
    throw new HearthError(`--executor-uids must be FIRST-LAST (e.g. ${DEFAULT_EXECUTOR_UIDS.first}-${DEFAULT_EXECUTOR_UIDS.first + DEFAULT_EXECUTOR_UIDS.count - 1}) or 'none'; got '${text}'`);
  }
  if (first < MIN_EXECUTOR_UID || last > MAX_EXECUTOR_UID) {
    throw new HearthError(`--executor-uids ${text}: uids must lie in ${MIN_EXECUTOR_UID}-${MAX_EXECUTOR_UID} (below ${MIN_EXECUTOR_UID} are the system's users); pick a range no account on this machine uses`);
  }
  return { first, count: last - first + 1 };
}

/** Where and as whom one app's executors run (per-app-uid mode). */
export interface ExecutorIdentity {
  uid: number;
  gid: number;
  /** `<dir>/u<uid>`: root-owned, 0750, group = the app's gid. */
  root: string;
  /** The executors' HOME, TMPDIR and working folder: owned by the app's uid, 0700. */
  home: string;
  /** The app's unpacked projects: root-owned, readable by the app's group only. */
  projects: string;
}

/** What the agent reports about its executors' user (status, register message). */
export type IsolationReport = { mode: "per-app-uid"; uids: string; dir: string } | { mode: "shared-user"; uid: number; why: string };

/** Options of `ExecutorUsers.create`. */
export interface ExecutorUsersOptions {
  /** `--executor-uids`: a range, `none`, or undefined for the default (a range when root, else shared). */
  uids?: UidRange | "none";
  /** Parent of the per-app folders (default `<tmpdir>/hearth-executors`). */
  dir?: string;
  /** The cluster secret: the uid of an app is derived from it. */
  secret: Buffer;
}

/** The executors' users of one agent. */
export class ExecutorUsers {
  /** uid → the app it was given to by this agent (two apps landing on one uid is refused, never shared). */
  private readonly owners = new Map<number, string>();

  private constructor(
    readonly report: IsolationReport,
    private readonly range: UidRange | undefined,
    private readonly secret: Buffer,
  ) {}

  /** Decides the mode (see the module doc) and, per-app-uid, makes the root-owned parent folder. */
  static create(opts: ExecutorUsersOptions): ExecutorUsers {
    const euid = process.geteuid?.() ?? -1;
    if (opts.uids === "none") return new ExecutorUsers({ mode: "shared-user", uid: euid, why: "--executor-uids none" }, undefined, opts.secret);
    if (euid !== 0) {
      if (opts.uids) {
        throw new HearthError(
          `--executor-uids needs the agent to run as root (it starts each app's executors as that app's own user; this agent runs as uid ${euid}). ` +
            `Run the agent as root, or leave the flag out: executors then share the agent's user (docs/architecture.md, "Security model")`,
        );
      }
      return new ExecutorUsers({ mode: "shared-user", uid: euid, why: "the agent is not root, so it cannot start executors as another user" }, undefined, opts.secret);
    }
    const range = opts.uids ?? DEFAULT_EXECUTOR_UIDS;
    const dir = path.resolve(opts.dir ?? path.join(os.tmpdir(), "hearth-executors"));
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    const st = lstatSync(dir);
    // <tmpdir> is world-writable: a folder someone else made first (or a link) would let them into every app's files.
    if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o022) !== 0) {
      throw new HearthError(`${dir} must be a folder owned by root that no one else can write (it holds every app's executor files); it is ${st.isSymbolicLink() ? "a symbolic link" : `owned by uid ${st.uid}, mode 0${(st.mode & 0o777).toString(8)}`}. Remove it, or name another with --executor-dir`);
    }
    chmodSync(dir, 0o711);
    const uids = `${range.first}-${range.first + range.count - 1}`;
    return new ExecutorUsers({ mode: "per-app-uid", uids, dir }, range, opts.secret);
  }

  /** A line for the agent's log saying who executors run as and what it means. */
  describe(): string {
    const r = this.report;
    if (r.mode === "per-app-uid") return `executors run as a user of their app alone (uids ${r.uids}, files under ${r.dir}/u<uid>): they cannot read HEARTH_HOME, the cluster secret, this agent's state, or other apps' executors`;
    return (
      `WARNING: executors run as this agent's own user (uid ${r.uid}; ${r.why}). Any service can read what that user can: ` +
      `HEARTH_HOME and the cluster secret (admin of the whole cluster), the agent's work dir, and every other executor's environment. ` +
      `An app token then opens the cluster, not just its app: run the agent as root (each app's executors get their own uid) for apps you do not trust`
    );
  }

  /** The user and folders of `app`'s executors; undefined when executors share the agent's user. */
  identityFor(app: string): ExecutorIdentity | undefined {
    if (!this.range || this.report.mode !== "per-app-uid") return undefined;
    const h = createHmac("sha256", this.secret).update(`hearth/executor-uid\0${app}`).digest();
    const uid = this.range.first + (h.readUInt32BE(0) % this.range.count);
    const owner = this.owners.get(uid);
    if (owner !== undefined && owner !== app) {
      throw new HearthError(`apps '${owner}' and '${app}' map to the same executor uid ${uid} on this agent; they must not share a user. Restart the agent with a wider --executor-uids range, or rename one app`);
    }
    this.owners.set(uid, app);
    const gid = uid;
    const root = path.join(this.report.dir, `u${uid}`);
    ownedDir(root, 0, gid, 0o750);
    // Made by root inside a folder only root can write: nobody can have put a link there.
    const home = path.join(root, "home");
    ownedDir(home, uid, gid, 0o700);
    const projects = path.join(root, "projects");
    ownedDir(projects, 0, gid, 0o750);
    return { uid, gid, root, home, projects };
  }
}

/** Makes `dir` (if missing) a real folder with this owner, group and mode; refuses a link or a non-folder. */
function ownedDir(dir: string, uid: number, gid: number, mode: number): void {
  mkdirSync(dir, { recursive: true, mode });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new HearthError(`${dir} must be a folder (it is ${st.isSymbolicLink() ? "a symbolic link" : "a file"}); remove it`);
  chownSync(dir, uid, gid);
  chmodSync(dir, mode);
}
