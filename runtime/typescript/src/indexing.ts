import { resolve } from "node:path";

import { AdapterError } from "./errors.js";
import { moduleURL } from "./run-task.js";
import { TASK_BRAND, brandProblem, declaration, hasBrand, type TaskDeclaration } from "./task-brand.js";

/** One task declaration located in the bundle. Field order matches the Go TaskManifest. */
export type TaskManifest = { id: string; module: string; export: string } & Omit<TaskDeclaration, "id">;

/** The failure of one module, as the index runner prints it. */
export interface IndexError {
  module: string;
  message: string;
  stack: string;
}

/** IndexFailure carries the module an indexing error belongs to. */
export class IndexFailure extends Error {
  override name = "IndexFailure";
  readonly module: string;
  readonly detail: IndexError;

  constructor(module: string, thrown: unknown) {
    const message = thrown instanceof Error ? thrown.message : String(thrown);
    super(`${module}: ${message}`);
    this.module = module;
    this.detail = { module, message, stack: thrown instanceof Error ? (thrown.stack ?? "") : "" };
  }
}

/**
 * moduleTasks lists the tasks among a module's exports, in export-name
 * order. A task exported under several names is listed once, under its first
 * non-default name. It never calls run.
 */
export function moduleTasks(exports: Record<string, unknown>, module: string): TaskManifest[] {
  const names = Object.keys(exports).sort((a, b) =>
    a === "default" ? 1 : b === "default" ? -1 : a < b ? -1 : a > b ? 1 : 0,
  );
  const seen = new Set<unknown>();
  const out: TaskManifest[] = [];
  for (const name of names) {
    const value = exports[name];
    if (!hasBrand(value) || seen.has(value)) continue;
    seen.add(value);
    const problem = brandProblem(value);
    if (problem !== undefined) throw new AdapterError(`export "${name}" cannot be indexed: ${problem}`);
    const { id, ...rest } = declaration(value);
    out.push({ id, module, export: name, ...rest });
  }
  return out;
}

/** indexModules imports each module (paths relative to bundleDir) and collects their tasks. */
export async function indexModules(bundleDir: string, modules: readonly string[]): Promise<TaskManifest[]> {
  const tasks: TaskManifest[] = [];
  const byId = new Map<string, TaskManifest>();
  for (const module of modules) {
    let found: TaskManifest[];
    try {
      const exports = (await import(moduleURL(resolve(bundleDir, module)))) as Record<string, unknown>;
      found = moduleTasks(exports, module);
    } catch (err) {
      throw new IndexFailure(module, err);
    }
    for (const t of found) {
      const prior = byId.get(t.id);
      if (prior !== undefined) {
        throw new IndexFailure(
          module,
          new AdapterError(
            `task id "${t.id}" is declared twice: ${prior.module} export "${prior.export}" and ${t.module} export "${t.export}"`,
          ),
        );
      }
      byId.set(t.id, t);
      tasks.push(t);
    }
  }
  return tasks;
}

/** The project configuration, from helmr.config.ts's default export. */
export interface ProjectConfig {
  project: string;
  dirs: string[];
  /** The default retry policy of the project's tasks (checked by the SDK's defineConfig and the control plane). */
  retry?: unknown;
}

/** indexConfig imports a bundled helmr.config module and returns its default export's fields. */
export async function indexConfig(path: string): Promise<ProjectConfig> {
  try {
    const exports = (await import(moduleURL(path))) as { default?: unknown };
    const config = exports.default as Partial<Record<keyof ProjectConfig, unknown>> | null | undefined;
    if (config === null || typeof config !== "object") {
      throw new AdapterError("helmr config has no default export: export default defineConfig({ project, dirs })");
    }
    const { project, dirs, retry } = config;
    if (typeof project !== "string" || project === "") {
      throw new AdapterError("helmr config: project must be a non-empty string");
    }
    if (!Array.isArray(dirs) || dirs.length === 0 || dirs.some((d) => typeof d !== "string" || d === "")) {
      throw new AdapterError("helmr config: dirs must be a non-empty array of directory paths");
    }
    return { project, dirs: [...(dirs as string[])], ...(retry !== undefined && retry !== null ? { retry } : {}) };
  } catch (err) {
    throw err instanceof IndexFailure ? err : new IndexFailure(path, err);
  }
}

export { TASK_BRAND };
