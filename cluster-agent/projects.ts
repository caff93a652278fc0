/**
 * Projects on an agent: each packed project (by content hash) is unpacked
 * once into the agent's work folder and gets its declared dependencies
 * installed from its lockfile; executors import service modules from there.
 */
import { spawn } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { decode } from "../sdk/wire/codec.js";
import { HearthError } from "../sdk/errors/index.js";
import { projectHash, type PackedFile } from "../sdk/runtime/project.js";

/** Unpacks and installs projects, once per hash, however many executors ask at once. */
export class ProjectStore {
  private readonly pending = new Map<string, Promise<string>>();

  /**
   * `group`: the gid of the app whose executors read these projects when they run as their app's own
   * user (executor-users.ts): the files stay root-owned and get the group's read (and search) bits, so
   * executors read them and cannot change them. Without it everything is private to the agent's user.
   */
  constructor(
    private readonly workDir: string,
    private readonly log: (line: string) => void,
    private readonly group?: number,
  ) {}

  /** The folder of project `hash`, unpacking `fetch()`'s archive and installing dependencies the first time. */
  ensure(hash: string, fetch: () => Promise<Buffer>): Promise<string> {
    if (!/^[0-9a-f]{16,64}$/.test(hash)) return Promise.reject(new HearthError(`bad project hash '${hash}'`));
    const dir = path.join(this.workDir, "projects", hash);
    if (existsSync(path.join(dir, ".hearth-ready"))) return Promise.resolve(dir);
    let p = this.pending.get(hash);
    if (!p) {
      p = this.install(hash, dir, fetch).finally(() => this.pending.delete(hash));
      this.pending.set(hash, p);
    }
    return p;
  }

  private async install(hash: string, dir: string, fetch: () => Promise<Buffer>): Promise<string> {
    const t0 = Date.now();
    const tmp = `${dir}.tmp-${process.pid}`;
    rmSync(tmp, { recursive: true, force: true });
    const archive = decode(await fetch()) as { format?: string; files?: PackedFile[] };
    if (archive.format !== "hearth-project/1" || !Array.isArray(archive.files)) throw new HearthError(`project ${hash} is not a hearth project archive`);
    for (const f of archive.files) {
      if (typeof f?.path !== "string" || !(f.data instanceof Uint8Array) || !Number.isInteger(f.mode)) throw new HearthError(`project ${hash}: a malformed file entry`);
    }
    // The archive is data from elsewhere: it must be what its name says.
    if (projectHash(archive.files) !== hash) throw new HearthError(`project ${hash}: the archive's content does not match its hash (corrupted or forged); refusing to unpack it`);
    for (const f of archive.files) {
      const target = path.resolve(tmp, f.path);
      if (!target.startsWith(`${tmp}${path.sep}`)) throw new HearthError(`project ${hash}: file path '${f.path}' escapes the project folder`);
      mkdirSync(path.dirname(target), { recursive: true, mode: 0o700 });
      // The owner's permission bits only: never setuid, setgid or sticky, and nothing for others (the work dir is private).
      writeFileSync(target, f.data, { mode: f.mode & 0o700 });
    }
    const pkg = JSON.parse(readFileSync(path.join(tmp, "package.json"), "utf8")) as { dependencies?: Record<string, string> };
    if (pkg.dependencies && Object.keys(pkg.dependencies).length > 0) {
      const hasLock = existsSync(path.join(tmp, "package-lock.json"));
      const args = hasLock
        ? ["ci", "--omit=dev", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund"]
        : ["install", "--omit=dev", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund"];
      if (!hasLock) this.log(`project ${hash} has dependencies but no package-lock.json; running npm install`);
      await run("npm", args, tmp, { ...process.env, npm_config_cache: path.join(this.workDir, "npm-cache"), HOME: this.workDir });
    }
    writeFileSync(path.join(tmp, ".hearth-ready"), String(Date.now()), { mode: 0o600 });
    makePrivate(tmp, this.group); // npm creates node_modules with its own umask
    rmSync(dir, { recursive: true, force: true });
    renameSync(tmp, dir);
    this.log(`project ${hash}: ${archive.files.length} files unpacked and installed in ${Date.now() - t0} ms`);
    return dir;
  }
}

/**
 * Takes other users' permissions off everything under `dir` (the owner's bits stay: executables stay
 * executable). With `group`, each entry goes to that group with the owner's read and search bits.
 */
function makePrivate(dir: string, group?: number): void {
  const fix = (p: string): void => {
    const owner = statSync(p).mode & 0o700;
    if (group === undefined) return chmodSync(p, owner);
    chownSync(p, 0, group);
    chmodSync(p, owner | ((owner & 0o500) >> 3));
  };
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isSymbolicLink()) continue;
    fix(p);
    if (e.isDirectory()) makePrivate(p, group);
  }
  fix(dir);
}

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("error", (err) => reject(new HearthError(`could not run ${cmd}: ${err.message}`)));
    child.on("close", (code) => (code === 0 ? resolve() : reject(new HearthError(`${cmd} ${args.join(" ")} failed (exit ${code}) in ${cwd}:\n${out.slice(-2000)}`))));
  });
}
