import type { SourceManifest } from "./manifest-types.js";
import { assertString, describe } from "./validate.js";

/** A file or directory of the task project, relative to the project root. */
export interface Source {
  readonly type: "file" | "directory";
  readonly path: string;
}

function projectPath(type: Source["type"], path: string): Source {
  assertString(`source.${type} path`, path);
  if (path.startsWith("/") || path.split("/").includes("..")) {
    throw new TypeError(
      `source.${type} path must be relative to the project root and stay inside it, got ${describe(path)}`,
    );
  }
  return Object.freeze({ type, path });
}

/** source names files of the task project to copy into an image. */
export const source = Object.freeze({
  /** file is one project file, such as "package.json". */
  file(path: string): Source {
    return projectPath("file", path);
  },
  /** directory is a project directory, such as "./tasks". */
  directory(path: string): Source {
    return projectPath("directory", path);
  },
});

/** sourceManifest serializes a source. */
export function sourceManifest(s: Source): SourceManifest {
  return { type: s.type, path: s.path };
}
