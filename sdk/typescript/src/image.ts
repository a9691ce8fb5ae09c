import type { Cache } from "./cache.js";
import type { ImageManifest, StepManifest } from "./manifest-types.js";
import { type Source, sourceManifest } from "./source.js";
import { assertAbsolutePath, assertName, assertString, describe } from "./validate.js";

/** Options of a copy step. */
export interface CopyOptions {
  /** "user", "user:group" or "uid:gid" in the image; default root. */
  owner?: string;
  /** The mode of every copied file, such as 0o644; default: as in the project (executable or not). */
  mode?: number;
}

/** A named cache mounted at mountPath while a run step executes. */
export interface CacheMount {
  mountPath: string;
  cache: Cache;
}

/** Options of a run step. */
export interface RunOptions {
  cache?: CacheMount[];
  /**
   * Build secrets: vault secrets of the project environment the step reads,
   * by name, as an environment variable ({ env: "NPM_TOKEN" }) or a file
   * ({ file: "/run/secrets/npmrc" }, under /run/secrets). Present for this
   * step only: never in a layer, the build log or the cache key.
   */
  secrets?: Record<string, BuildSecret>;
}

/** Options of a from step. */
export interface FromOptions {
  /**
   * The vault secret (of the project environment) holding the credentials
   * for pulling a registry reference: JSON {"username": "...", "password":
   * "..."}, JSON {"token": "..."} (a registry identity or bearer token), or
   * "user:password". Only for registry references: built-in ("helmr/...")
   * and "oci:..." bases are on the worker. Read at build time only: never
   * in a layer, the build log or the cache key.
   */
  credentials?: string;
}

/** Where a build secret appears during its run step. */
export type BuildSecret = { env: string; file?: never } | { file: string; env?: never };

/**
 * An image declaration: a name and ordered build steps. Images are immutable;
 * every builder method returns a new image with one more step, so a base image
 * can be shared and extended.
 */
export class Image {
  readonly name: string;
  readonly #steps: readonly StepManifest[];

  /** @internal Use image(name). */
  constructor(name: string, steps: readonly StepManifest[]) {
    this.name = name;
    this.#steps = steps;
  }

  /**
   * from sets the base image reference; it must be the first step. A
   * registry reference on a registry that needs a login names the vault
   * secret holding its credentials: from(ref, { credentials: "REGISTRY_AUTH" }).
   */
  from(ref: string, options: FromOptions = {}): Image {
    assertString(`image "${this.name}" from ref`, ref);
    if (this.#steps.length > 0) {
      throw new Error(`image "${this.name}": from must be the first step and appear once`);
    }
    const step: StepManifest & { kind: "from" } = { kind: "from", ref };
    const creds = options.credentials;
    if (creds !== undefined) {
      if (typeof creds !== "string" || !/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(creds)) {
        throw new TypeError(`image "${this.name}" from credentials must name a vault secret (letters, digits and "_"), got ${describe(creds)}`);
      }
      if (ref.startsWith("helmr/") || ref.startsWith("oci:")) {
        throw new TypeError(`image "${this.name}" from ${ref}: credentials only apply to registry references`);
      }
      step.credentials = creds;
    }
    return this.#with(step);
  }

  /** run executes argv (no shell) in the image, optionally with cache mounts. */
  run(argv: readonly string[], options: RunOptions = {}): Image {
    if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== "string")) {
      throw new TypeError(`image "${this.name}" run argv must be a non-empty array of strings`);
    }
    const step: StepManifest & { kind: "run" } = { kind: "run", argv: [...argv] };
    if (options.secrets !== undefined) {
      const out: Record<string, { env?: string; file?: string }> = {};
      for (const [name, where] of Object.entries(options.secrets)) {
        if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(name)) {
          throw new TypeError(`image "${this.name}" build secret ${describe(name)}: names are letters, digits and "_"`);
        }
        if (where?.env !== undefined && where.file === undefined && /^[A-Za-z_][A-Za-z0-9_]*$/.test(where.env)) {
          out[name] = { env: where.env };
        } else if (where?.file !== undefined && where.env === undefined && /^\/run\/secrets\/[A-Za-z0-9_.-]+$/.test(where.file)) {
          out[name] = { file: where.file };
        } else {
          throw new TypeError(`image "${this.name}" build secret ${name} must be { env: "NAME" } or { file: "/run/secrets/<name>" }, got ${describe(where)}`);
        }
      }
      step.secrets = out;
    }
    const mounts = options.cache ?? [];
    if (mounts.length > 0) {
      step.cache = mounts.map((m) => {
        assertAbsolutePath(`image "${this.name}" cache mountPath`, m.mountPath);
        if (m.cache?.kind !== "cache") {
          throw new TypeError(
            `image "${this.name}" cache mount at ${m.mountPath} needs cache(name), got ${describe(m.cache)}`,
          );
        }
        return { mountPath: m.mountPath, cache: m.cache.name };
      });
    }
    return this.#with(step);
  }

  /**
   * copy copies a project file or directory to dest inside the image. Files
   * keep their executable bit unless options.mode (say 0o640) sets every
   * copied file's mode; options.owner ("user", "user:group" or "uid:gid",
   * resolved in the image) owns what is copied (default root).
   * Directory sources skip what .helmrignore (or .dockerignore) excludes.
   */
  copy(dest: string, src: Source, options: CopyOptions = {}): Image {
    assertAbsolutePath(`image "${this.name}" copy dest`, dest);
    if (src?.type !== "file" && src?.type !== "directory") {
      throw new TypeError(`image "${this.name}" copy source must be source.file(...) or source.directory(...)`);
    }
    const step: StepManifest & { kind: "copy" } = { kind: "copy", dest, source: sourceManifest(src) };
    if (options.owner !== undefined) {
      if (typeof options.owner !== "string" || !/^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$/.test(options.owner)) {
        throw new TypeError(`image "${this.name}" copy owner must be "user", "user:group" or "uid:gid", got ${describe(options.owner)}`);
      }
      step.owner = options.owner;
    }
    if (options.mode !== undefined) {
      if (!Number.isInteger(options.mode) || options.mode < 0 || options.mode > 0o7777) {
        throw new TypeError(`image "${this.name}" copy mode must be a file mode such as 0o644, got ${describe(options.mode)}`);
      }
      step.mode = options.mode;
    }
    return this.#with(step);
  }

  /** copyFrom copies src from another image's filesystem to dest. */
  copyFrom(img: Image, src: string, dest: string): Image {
    if (!(img instanceof Image)) {
      throw new TypeError(`image "${this.name}" copyFrom needs an image(...), got ${describe(img)}`);
    }
    assertAbsolutePath(`image "${this.name}" copyFrom src`, src);
    assertAbsolutePath(`image "${this.name}" copyFrom dest`, dest);
    return this.#with({ kind: "copyFrom", image: img.toManifest(), src, dest });
  }

  /** workdir sets the working directory of later steps. */
  workdir(path: string): Image {
    assertAbsolutePath(`image "${this.name}" workdir`, path);
    return this.#with({ kind: "workdir", path });
  }

  /** env sets an environment variable for later steps and the task. */
  env(key: string, value: string): Image {
    if (typeof key !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
      throw new TypeError(`image "${this.name}" env key must be a variable name, got ${describe(key)}`);
    }
    if (typeof value !== "string") {
      throw new TypeError(`image "${this.name}" env ${key} value must be a string, got ${describe(value)}`);
    }
    return this.#with({ kind: "env", key, value });
  }

  /** user sets the user (name, uid or uid:gid) of later steps and the task. */
  user(user: string): Image {
    assertString(`image "${this.name}" user`, user);
    return this.#with({ kind: "user", user });
  }

  /** toManifest serializes the image; it fails if the image has no from step. */
  toManifest(): ImageManifest {
    if (this.#steps[0]?.kind !== "from") {
      throw new Error(`image "${this.name}" has no base: start it with .from(ref)`);
    }
    return { name: this.name, steps: JSON.parse(JSON.stringify(this.#steps)) as StepManifest[] };
  }

  #with(step: StepManifest): Image {
    if (step.kind !== "from" && this.#steps.length === 0) {
      throw new Error(`image "${this.name}": call .from(ref) before .${step.kind}(...)`);
    }
    return new Image(this.name, [...this.#steps, step]);
  }
}

/** image declares a named image; chain .from(ref) and further steps. */
export function image(name: string): Image {
  assertName("image name", name);
  return new Image(name, []);
}
