// Indexing helpers: turn a module's exports into task manifests. The runtime's
// index runner applies the same rules to bundled modules.

import { TASK_BRAND, TASK_BRAND_VERSION, type TaskBrand } from "./brand.js";
import type { TaskManifest } from "./manifest-types.js";

export type * from "./manifest-types.js";
export { configManifest } from "./config.js";
export { TASK_BRAND, TASK_BRAND_VERSION, type TaskBrand } from "./brand.js";

/** isTask reports whether value is a task declared with any copy of this SDK. */
export function isTask(value: unknown): value is { readonly [TASK_BRAND]: TaskBrand } {
  if ((typeof value !== "object" && typeof value !== "function") || value === null) return false;
  const brand = (value as { [TASK_BRAND]?: unknown })[TASK_BRAND];
  return (
    typeof brand === "object" &&
    brand !== null &&
    (brand as TaskBrand).version === TASK_BRAND_VERSION &&
    typeof (brand as TaskBrand).manifest === "function"
  );
}

/**
 * taskManifests returns the manifest of every task among a module's exports,
 * in export-name order. A task exported under several names is listed once,
 * under its first non-default name.
 */
export function taskManifests(moduleExports: Record<string, unknown>, modulePath: string): TaskManifest[] {
  const seen = new Map<unknown, string>();
  const names = Object.keys(moduleExports).sort((a, b) =>
    a === "default" ? 1 : b === "default" ? -1 : a < b ? -1 : a > b ? 1 : 0,
  );
  const out: TaskManifest[] = [];
  for (const name of names) {
    const value = moduleExports[name];
    if (!isTask(value) || seen.has(value)) continue;
    seen.set(value, name);
    const { id, ...rest } = value[TASK_BRAND].manifest();
    out.push({ id, module: modulePath, export: name, ...rest });
  }
  return out;
}
