// tasks: trigger child runs from inside a task's run. The guest adapter
// (runtime/typescript/src/tasks.ts) implements them and installs them
// under a registered symbol for the run; these are the types task code
// sees, typed by the task object passed (its payload and output).
//
//     const r = await tasks.triggerAndWait(summarize, { file: "a.md" });
//     if (r.ok) use(r.output); // summarize's output type
//     const { runs } = await tasks.batchTriggerAndWait(square, [{ payload: { n: 1 } }, { payload: { n: 2 } }]);
//
// A parent that waits is parked (its sandbox checkpointed, its slot
// freed) while its children run, where the worker can park; cancelling it
// cancels its unfinished children.

import type { Task, TaskOutput, TaskPayload } from "./task.js";

/** Any task, for the type parameters of tasks.*. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyTask = Task<any, any>;

/** Options of a child run (what a trigger through the API takes). */
export interface TriggerOptions {
  /**
   * Makes the trigger idempotent, scoped to this run: a repeat by it (its
   * next attempt, say) gets the same child, and a wait for it the same
   * result.
   */
  idempotencyKey?: string;
  /** How long the key holds: a duration ("24h", "2d") or seconds. */
  idempotencyKeyTTL?: string | number;
  /** Up to 10 tags (filterable). */
  tags?: string | string[];
  /** The queue the child waits in (default its task's). */
  queue?: string | { name: string };
  /** Splits the queue's concurrency limit per key (a tenant, say). */
  concurrencyKey?: string;
  /** Higher goes first (-1000 to 1000). */
  priority?: number;
  /** Start no earlier than: a duration ("1h", "2d"), seconds, or a Date. */
  delay?: string | number | Date;
  /** Expire (EXPIRED) if not started within: a duration or seconds. */
  ttl?: string | number;
  /** Bindings of the child task's secrets (name → "vault:NAME"); absent: this run's bindings of the same names. */
  secrets?: Record<string, string>;
}

/** A triggered child run. */
export interface RunHandle {
  id: string;
  taskId: string;
}

/** Why a child run did not complete. */
export interface TaskRunError {
  /** FAILED, TIMED_OUT, CANCELED or EXPIRED. */
  status: string;
  /** The failure class: task_process, timeout, canceled, ... */
  class: string;
  message: string;
  /** The name of the error the child's task threw, if it threw one. */
  name?: string;
  stack?: string;
}

/**
 * How a child run ended: ok with its output, or not with its error.
 * unwrap returns the output, or throws a ChildRunError.
 */
export type TaskRunResult<O = unknown> = (
  | { ok: true; id: string; taskId: string; output: O; error?: undefined }
  | { ok: false; id: string; taskId: string; error: TaskRunError; output?: undefined }
) & {
  unwrap(): O;
};

/** What triggerAndWait returns: a promise of the result, whose unwrap() resolves with the output itself (or rejects). */
export type TaskRunPromise<O = unknown> = Promise<TaskRunResult<O>> & { unwrap(): Promise<O> };

/** One item of a batch. */
export interface BatchItem<P = unknown> {
  payload: P;
  options?: TriggerOptions;
}

/** The children a batch triggered, in order. */
export interface BatchHandle {
  runs: RunHandle[];
}

/** How the children of a batch ended, in order. */
export interface BatchResult<O = unknown> {
  runs: TaskRunResult<O>[];
}

/** The registered symbol under which a ChildRunError carries its brand. */
export const CHILD_RUN_ERROR_BRAND: unique symbol = Symbol.for("helmr.childRunError");

/**
 * ChildRunError is what unwrap throws for a child run that did not
 * complete; `instanceof` holds for the runtime's errors.
 */
export class ChildRunError extends Error {
  override name = "ChildRunError";
  readonly runId: string;
  readonly taskId: string;
  readonly status: string;
  readonly error: TaskRunError;

  constructor(runId: string, taskId: string, error: TaskRunError) {
    super(`child run ${runId} (task ${taskId}) ended ${error.status}: ${error.message}`);
    this.runId = runId;
    this.taskId = taskId;
    this.status = error.status;
    this.error = error;
    Object.defineProperty(this, CHILD_RUN_ERROR_BRAND, { value: true, enumerable: false });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    return this === ChildRunError && value instanceof Error && (value as { [CHILD_RUN_ERROR_BRAND]?: unknown })[CHILD_RUN_ERROR_BRAND] === true;
  }
}

/** A task object, or a task id (with the task's type as the type argument: tasks.trigger<typeof summarize>("summarize", ...)). */
export type TaskIdentifier<T extends AnyTask> = T | string;

/** The payload and options of a trigger: the payload may be left out for a task that takes none (void). */
export type TriggerArgs<T extends AnyTask> = [TaskPayload<T>] extends [void]
  ? [payload?: TaskPayload<T>, options?: TriggerOptions]
  : [payload: TaskPayload<T>, options?: TriggerOptions];

/** The child-run API. */
export interface Tasks {
  /** trigger starts a child run and resolves with its id once queued; the parent goes on. */
  trigger<T extends AnyTask>(task: TaskIdentifier<T>, ...args: TriggerArgs<T>): Promise<RunHandle>;
  /** triggerAndWait starts a child run and resolves with how it ended, once it has. */
  triggerAndWait<T extends AnyTask>(task: TaskIdentifier<T>, ...args: TriggerArgs<T>): TaskRunPromise<TaskOutput<T>>;
  /** batchTrigger starts a child run per item (at most 500). */
  batchTrigger<T extends AnyTask>(task: TaskIdentifier<T>, items: BatchItem<TaskPayload<T>>[]): Promise<BatchHandle>;
  /** batchTriggerAndWait starts a child run per item and resolves, once all have ended, with their results in order. */
  batchTriggerAndWait<T extends AnyTask>(task: TaskIdentifier<T>, items: BatchItem<TaskPayload<T>>[]): Promise<BatchResult<TaskOutput<T>>>;
}

const TASKS_BRIDGE = Symbol.for("helmr.tasks");

/** runtime returns the run's tasks, which the adapter installed. */
function runtime(what: string): Tasks {
  const t = (globalThis as Record<symbol, unknown>)[TASKS_BRIDGE] as Tasks | undefined;
  if (t === undefined) {
    throw new Error(`tasks.${what} triggers child runs from inside a task's run (the Helmr runtime provides it); from elsewhere, use HelmrClient`);
  }
  return t;
}

/**
 * tasks triggers child runs from inside a task's run: ordinary runs of
 * the same project environment that name this run as their parent.
 */
export const tasks: Tasks = Object.freeze({
  async trigger<T extends AnyTask>(task: TaskIdentifier<T>, ...args: TriggerArgs<T>): Promise<RunHandle> {
    return runtime("trigger").trigger(task, ...args);
  },
  triggerAndWait<T extends AnyTask>(task: TaskIdentifier<T>, ...args: TriggerArgs<T>): TaskRunPromise<TaskOutput<T>> {
    try {
      return runtime("triggerAndWait").triggerAndWait(task, ...args);
    } catch (err) {
      const p = Promise.reject(err as Error);
      return Object.assign(p, { unwrap: () => p as Promise<never> });
    }
  },
  async batchTrigger<T extends AnyTask>(task: TaskIdentifier<T>, items: BatchItem<TaskPayload<T>>[]): Promise<BatchHandle> {
    return runtime("batchTrigger").batchTrigger(task, items);
  },
  async batchTriggerAndWait<T extends AnyTask>(task: TaskIdentifier<T>, items: BatchItem<TaskPayload<T>>[]): Promise<BatchResult<TaskOutput<T>>> {
    return runtime("batchTriggerAndWait").batchTriggerAndWait(task, items);
  },
});
