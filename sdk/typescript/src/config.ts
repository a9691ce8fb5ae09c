import { type RetryOptions, retryManifest } from "./flow.js";
import type { ConfigManifest } from "./manifest-types.js";
import { assertName, assertString, describe } from "./validate.js";

/** The project configuration, the default export of helmr.config.ts. */
export interface Config {
  /** The project name, such as "github-pr-review". */
  project: string;
  /** Directories, relative to the config file, whose modules declare tasks. */
  dirs: string[];
  /** The retry policy of every task that declares none. */
  retry?: RetryOptions;
}

/** defineConfig checks and returns the project configuration. */
export function defineConfig(config: Config): Config {
  return configManifest(config);
}

/** configManifest validates a config value (for example a bundled default export). */
export function configManifest(config: unknown): ConfigManifest {
  if (config === null || typeof config !== "object") {
    throw new TypeError(`helmr config must be an object from defineConfig({ project, dirs }), got ${describe(config)}`);
  }
  const { project, dirs, retry } = config as Partial<Record<keyof Config, unknown>>;
  assertName("config project", project);
  if (!Array.isArray(dirs) || dirs.length === 0) {
    throw new TypeError(`config dirs must be a non-empty array of directories, got ${describe(dirs)}`);
  }
  for (const dir of dirs) {
    assertString("config dirs entry", dir);
    if (dir.startsWith("/") || dir.split("/").includes("..")) {
      throw new TypeError(`config dirs entry must be relative and stay inside the project, got ${describe(dir)}`);
    }
  }
  return { project, dirs: [...(dirs as string[])], ...(retry !== undefined ? { retry: retryManifest("config", retry) } : {}) };
}
