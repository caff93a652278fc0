/**
 * Project packaging: the user's project (the folder of its package.json) is
 * packed into one content-addressed archive, honouring .gitignore files and
 * never including node_modules or .git, so that an agent on another node can
 * unpack it once and install its dependencies from the lockfile.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { encode } from "../wire/codec.js";
import { ServiceConfigError } from "../errors/index.js";

/** One packed file. */
export interface PackedFile {
  path: string;
  mode: number;
  data: Buffer;
}

/** A packed project: its root on the driver, the archive and its content hash. */
export interface PackedProject {
  root: string;
  hash: string;
  archive: Buffer;
  files: number;
}

interface Rule {
  re: RegExp;
  negate: boolean;
  dirOnly: boolean;
}

const ALWAYS_SKIPPED = new Set(["node_modules", ".git"]);

/** The nearest folder at or above `from` that holds a package.json. */
export function findProjectRoot(from: string): string {
  let dir = path.resolve(from);
  for (;;) {
    if (existsSync(path.join(dir, "package.json"))) return dir;
    const up = path.dirname(dir);
    if (up === dir) throw new ServiceConfigError(`no package.json at or above ${from}: a project to pack needs one`);
    dir = up;
  }
}

/** Turns .gitignore lines into rules relative to the folder that holds the file. */
export function parseGitignore(text: string): Rule[] {
  const rules: Rule[] = [];
  for (const raw of text.split(/\r?\n/)) {
    let line = raw.replace(/\s+$/, "");
    if (line === "" || line.startsWith("#")) continue;
    const negate = line.startsWith("!");
    if (negate) line = line.slice(1);
    const dirOnly = line.endsWith("/");
    if (dirOnly) line = line.slice(0, -1);
    const anchored = line.includes("/");
    if (line.startsWith("/")) line = line.slice(1);
    let re = "";
    for (let i = 0; i < line.length; i++) {
      const c = line[i]!;
      if (c === "*" && line[i + 1] === "*") {
        if (line[i + 2] === "/") {
          re += "(?:.*/)?";
          i += 2;
        } else {
          re += ".*";
          i += 1;
        }
      } else if (c === "*") re += "[^/]*";
      else if (c === "?") re += "[^/]";
      else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
    }
    rules.push({ re: new RegExp(anchored ? `^${re}$` : `(?:^|/)${re}$`), negate, dirOnly });
  }
  return rules;
}

function ignored(rel: string, isDir: boolean, scopes: Array<{ base: string; rules: Rule[] }>): boolean {
  let out = false;
  for (const { base, rules } of scopes) {
    if (base !== "" && !rel.startsWith(`${base}/`)) continue;
    const sub = base === "" ? rel : rel.slice(base.length + 1);
    for (const r of rules) if ((!r.dirOnly || isDir) && r.re.test(sub)) out = !r.negate;
  }
  return out;
}

/** Lists the files of a project that would be packed, in a stable order. */
export function listProjectFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string, scopes: Array<{ base: string; rules: Rule[] }>): void => {
    const rel = path.relative(root, dir).split(path.sep).join("/");
    const gi = path.join(dir, ".gitignore");
    const here = existsSync(gi) ? [...scopes, { base: rel, rules: parseGitignore(readFileSync(gi, "utf8")) }] : scopes;
    for (const name of readdirSync(dir).sort()) {
      if (ALWAYS_SKIPPED.has(name)) continue;
      const full = path.join(dir, name);
      const st = statSync(full);
      const r = rel === "" ? name : `${rel}/${name}`;
      if (ignored(r, st.isDirectory(), here)) continue;
      if (st.isDirectory()) walk(full, here);
      else if (st.isFile()) out.push(r);
    }
  };
  walk(root, []);
  return out;
}

/** Packs a project into a content-addressed archive. */
export function packProject(root: string): PackedProject {
  const files: PackedFile[] = listProjectFiles(root).map((rel) => {
    const full = path.join(root, rel);
    return { path: rel, mode: statSync(full).mode & 0o777, data: readFileSync(full) };
  });
  return { root, hash: projectHash(files), archive: encode({ format: "hearth-project/1", files }), files: files.length };
}

/** The content hash of a project's files (paths, modes, bytes), which names it on every agent. */
export function projectHash(files: readonly PackedFile[]): string {
  const h = createHash("sha256");
  for (const f of files) h.update(`${f.path}\0${f.mode}\0${f.data.byteLength}\0`).update(f.data);
  return h.digest("hex").slice(0, 32);
}
