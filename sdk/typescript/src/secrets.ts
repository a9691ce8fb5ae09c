import type { SecretTargetManifest } from "./manifest-types.js";
import { assertAbsolutePath, assertString, describe } from "./validate.js";

/** Permission bits as a number (0o400) or an octal string ("0400"). */
export type FileMode = number | string;

/**
 * Egress binding: the hosts (domain names, "*.example.com" for every name
 * below example.com) the secret's value may be sent to. The sandbox then holds
 * a placeholder, never the value; the worker's network stack puts the value
 * into HTTPS requests to these hosts (headers, Basic credentials included; and
 * bodies with `{ hosts, body: true }`). A vault secret with hosts of its own
 * must allow every host named here.
 */
export type SecretEgress = readonly string[] | { hosts: readonly string[]; body?: boolean };

/** The secret's value appears as an environment variable. */
export interface EnvSecret {
  env: string;
  egress?: SecretEgress;
  file?: never;
  directory?: never;
}

/** The secret's value is written to a file. */
export interface FileSecret {
  file: string;
  mode?: FileMode;
  owner?: string;
  egress?: SecretEgress;
  env?: never;
  directory?: never;
}

/** The secret's value (a JSON object of file name to content) fills a directory. */
export interface DirectorySecret {
  directory: string;
  files: string[];
  mode?: FileMode;
  owner?: string;
  egress?: SecretEgress;
  env?: never;
  file?: never;
}

/** Where a declared secret appears inside the sandbox. */
export type SecretDeclaration = EnvSecret | FileSecret | DirectorySecret;

const secretNamePattern = /^[A-Za-z_][A-Za-z0-9_.-]*$/;
const envPattern = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** secretsManifest validates and serializes a task's secret declarations. */
export function secretsManifest(
  taskId: string,
  secrets: Readonly<Record<string, SecretDeclaration>>,
): Record<string, SecretTargetManifest> {
  const out: Record<string, SecretTargetManifest> = {};
  for (const [name, decl] of Object.entries(secrets)) {
    const where = `task "${taskId}" secret ${JSON.stringify(name)}`;
    if (!secretNamePattern.test(name)) {
      throw new TypeError(`${where}: name must start with a letter or "_" and use letters, digits, "_", "." or "-"`);
    }
    out[name] = secretTarget(where, decl);
  }
  return out;
}

function secretTarget(where: string, decl: SecretDeclaration): SecretTargetManifest {
  if (decl === null || typeof decl !== "object") {
    throw new TypeError(`${where} must be { env }, { file } or { directory, files }, got ${describe(decl)}`);
  }
  const set = (["env", "file", "directory"] as const).filter((k) => decl[k] !== undefined);
  if (set.length !== 1) {
    throw new TypeError(`${where} must set exactly one of env, file, directory`);
  }
  if (decl.env !== undefined) {
    if (!envPattern.test(decl.env)) {
      throw new TypeError(`${where}: env must be a variable name, got ${describe(decl.env)}`);
    }
    if ("mode" in decl || "owner" in decl || "files" in decl) {
      throw new TypeError(`${where}: mode, owner and files apply to file and directory secrets only`);
    }
    const out: SecretTargetManifest = { env: decl.env };
    if (decl.egress !== undefined) out.egress = egressManifest(where, decl.egress);
    return out;
  }
  const target: SecretTargetManifest = {};
  if (decl.file !== undefined) {
    assertAbsolutePath(`${where} file`, decl.file);
    target.file = decl.file;
  } else {
    assertAbsolutePath(`${where} directory`, decl.directory);
    target.directory = decl.directory;
    const files: unknown = decl.files;
    if (!Array.isArray(files) || files.length === 0) {
      throw new TypeError(`${where}: files must list the file names the directory holds`);
    }
    target.files = files.map((f: unknown) => {
      if (typeof f !== "string" || f === "" || f === "." || f === ".." || f.includes("/")) {
        throw new TypeError(`${where}: files must be plain file names, got ${describe(f)}`);
      }
      return f;
    });
  }
  if (decl.mode !== undefined) target.mode = formatMode(where, decl.mode);
  if (decl.owner !== undefined) {
    assertString(`${where} owner`, decl.owner);
    target.owner = decl.owner;
  }
  if (decl.egress !== undefined) target.egress = egressManifest(where, decl.egress);
  return target;
}

const hostPattern = /^(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/;

function egressManifest(where: string, egress: SecretEgress): { hosts: string[]; body?: boolean } {
  const obj = Array.isArray(egress) ? { hosts: egress } : egress;
  if (obj === null || typeof obj !== "object" || !Array.isArray((obj as { hosts?: unknown }).hosts)) {
    throw new TypeError(`${where}: egress must be a list of host names or { hosts, body }, got ${describe(egress)}`);
  }
  const { hosts, body } = obj as { hosts: unknown[]; body?: unknown };
  if (hosts.length === 0) {
    throw new TypeError(`${where}: egress names at least one host`);
  }
  const out: { hosts: string[]; body?: boolean } = {
    hosts: hosts.map((h) => {
      if (typeof h !== "string" || !hostPattern.test(h.toLowerCase())) {
        throw new TypeError(`${where}: egress host ${describe(h)} is not a domain name ("api.example.com" or "*.example.com"; no IP addresses or ports)`);
      }
      return h.toLowerCase();
    }),
  };
  if (body !== undefined) {
    if (typeof body !== "boolean") throw new TypeError(`${where}: egress body must be a boolean, got ${describe(body)}`);
    if (body) out.body = true;
  }
  return out;
}

/** formatMode renders permission bits as a zero-prefixed octal string ("0400"). */
export function formatMode(where: string, mode: FileMode): string {
  let bits: number;
  if (typeof mode === "number") {
    bits = mode;
  } else if (typeof mode === "string" && /^0?[0-7]{3,4}$/.test(mode)) {
    bits = Number.parseInt(mode, 8);
  } else {
    throw new TypeError(`${where}: mode must be a number such as 0o400 or an octal string such as "0400", got ${describe(mode)}`);
  }
  if (!Number.isInteger(bits) || bits < 0 || bits > 0o7777) {
    throw new TypeError(`${where}: mode ${describe(mode)} is out of range`);
  }
  return `0${bits.toString(8).padStart(3, "0")}`;
}
