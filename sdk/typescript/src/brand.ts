// The contract between a task object and the Helmr runtime. Each deployed
// module bundles its own copy of the SDK, and the runtime's adapter and index
// runner are separate bundles, so the brand is a registered symbol
// (Symbol.for) and the serializer travels with the task object itself.

import type { TaskDeclaration } from "./manifest-types.js";

/** The registered symbol under which a task object carries its brand. */
export const TASK_BRAND: unique symbol = Symbol.for("helmr.task");

/** The brand's version; the runtime refuses brands it does not know. */
export const TASK_BRAND_VERSION = 1;

/** What a task object holds under TASK_BRAND. */
export interface TaskBrand {
  readonly version: typeof TASK_BRAND_VERSION;
  /** manifest returns a fresh copy of the task's declaration. */
  manifest(): TaskDeclaration;
}
