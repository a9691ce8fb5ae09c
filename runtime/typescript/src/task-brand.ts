// The runtime's side of the task brand that @helmr/sdk puts on every task
// object (sdk/typescript/src/brand.ts). Each deployed module bundles its own
// copy of the SDK, so tasks are recognized by a registered symbol, never by
// instanceof, and each task serializes itself.

/** The registered symbol under which a task object carries its brand. */
export const TASK_BRAND = Symbol.for("helmr.task");

/** The brand version this runtime understands. */
export const TASK_BRAND_VERSION = 1;

/** A task's declaration: its manifest without module and export. */
export interface TaskDeclaration {
  id: string;
  maxDuration?: number;
  secrets?: Record<string, unknown>;
  sandbox: unknown;
  hasRun: boolean;
}

/** A task object as the runtime sees it. */
export interface BrandedTask {
  readonly id?: unknown;
  readonly run?: unknown;
  readonly [TASK_BRAND]: { readonly version: unknown; manifest?: unknown };
}

/** hasBrand reports whether value carries a task brand of any version. */
export function hasBrand(value: unknown): value is BrandedTask {
  if ((typeof value !== "object" && typeof value !== "function") || value === null) return false;
  const brand = (value as Record<symbol, unknown>)[TASK_BRAND];
  return typeof brand === "object" && brand !== null;
}

/** brandProblem explains why a branded value cannot be used, or returns undefined. */
export function brandProblem(value: BrandedTask): string | undefined {
  const brand = value[TASK_BRAND];
  if (brand.version !== TASK_BRAND_VERSION) {
    return `it was declared with an incompatible @helmr/sdk (task brand version ${String(brand.version)}, this runtime supports ${TASK_BRAND_VERSION})`;
  }
  if (typeof brand.manifest !== "function") return "its brand has no manifest function";
  return undefined;
}

/** declaration calls the task's own serializer and checks the basic shape. */
export function declaration(value: BrandedTask): TaskDeclaration {
  const manifest = value[TASK_BRAND].manifest as () => unknown;
  const d = manifest() as Partial<TaskDeclaration> | null;
  if (d === null || typeof d !== "object" || typeof d.id !== "string" || typeof d.hasRun !== "boolean") {
    throw new Error("task manifest is malformed: want { id, sandbox, hasRun, ... }");
  }
  return d as TaskDeclaration;
}
