// tasks.*: child runs, triggered from inside a run. @helmr/sdk's `tasks`
// export forwards to the object installed here under a registered symbol
// (each deployed module bundles its own copy of the SDK, so it cannot be a
// module's state). Each call is one request to the worker:
// tasks.trigger / batchTrigger send "tasks.trigger" and resolve with the
// children's ids; tasks.triggerAndWait / batchTriggerAndWait send
// "tasks.triggerAndWait", which the worker answers once every child has
// ended (the run may be parked meanwhile), with their results in order.

import type { Requester } from "./context.js";
import type { MethodParams } from "./protocol.js";

/** The registered symbol under which the adapter installs tasks for @helmr/sdk. */
export const TASKS_BRIDGE = Symbol.for("helmr.tasks");

/** The registered symbol under which a ChildRunError carries its brand (@helmr/sdk's ChildRunError recognizes it). */
export const CHILD_RUN_ERROR_BRAND = Symbol.for("helmr.childRunError");

/** Options of a child run, as @helmr/sdk's TriggerOptions. */
export interface TriggerOptions {
  /** Scoped to this run: a repeat by it (a retried attempt) gets the same child. */
  idempotencyKey?: string;
  /** How long the key holds: a duration ("24h", "2d") or seconds. */
  idempotencyKeyTTL?: string | number;
  tags?: string | string[];
  queue?: string | { name: string };
  concurrencyKey?: string;
  priority?: number;
  /** Start no earlier than: a duration ("1h", "2d"), seconds, or a Date. */
  delay?: string | number | Date;
  /** Expire if not started within: a duration or seconds. */
  ttl?: string | number;
  /** Bindings of the child task's secrets (name → "vault:NAME"); absent: this run's of the same names. */
  secrets?: Record<string, string>;
}

/** A triggered child. */
export interface RunHandle {
  id: string;
  taskId: string;
}

/** Why a child did not complete. */
export interface TaskRunError {
  /** The child's final status: FAILED, TIMED_OUT, CANCELED or EXPIRED. */
  status: string;
  /** The failure class (task_process, timeout, canceled, ...). */
  class: string;
  message: string;
  /** The name of the error the child's task threw, if it threw one. */
  name?: string;
  stack?: string;
}

/** How a child ended: its output, or its error; unwrap returns the output or throws a ChildRunError. */
export type TaskRunResult<O = unknown> = (
  | { ok: true; id: string; taskId: string; output: O; error?: undefined }
  | { ok: false; id: string; taskId: string; error: TaskRunError; output?: undefined }
) & { unwrap(): O };

/** triggerAndWait's promise: a TaskRunResult, with unwrap() for the output itself. */
export type TaskRunPromise<O = unknown> = Promise<TaskRunResult<O>> & { unwrap(): Promise<O> };

/** One item of a batch. */
export interface BatchItem {
  payload?: unknown;
  options?: TriggerOptions;
}

/** What the adapter installs for @helmr/sdk's tasks. */
export interface AdapterTasks {
  trigger(task: TaskRef, payload?: unknown, options?: TriggerOptions): Promise<RunHandle>;
  triggerAndWait(task: TaskRef, payload?: unknown, options?: TriggerOptions): TaskRunPromise;
  batchTrigger(task: TaskRef, items: BatchItem[]): Promise<{ runs: RunHandle[] }>;
  batchTriggerAndWait(task: TaskRef, items: BatchItem[]): Promise<{ runs: TaskRunResult[] }>;
}

/** A task: its id, or a task object (anything with a string id). */
export type TaskRef = string | { readonly id: string };

/** The most items of a batch (the control plane's limit). */
export const MAX_BATCH = 500;

/** ChildRunError is what unwrap throws for a child that did not complete. */
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
}

type Item = MethodParams["tasks.trigger"]["items"][number];

/** createTasks builds tasks.* over request (the worker's channel). */
export function createTasks(ask: Requester): AdapterTasks {
  const trigger = async (what: string, items: Item[]): Promise<RunHandle[]> => {
    const got = (await ask("tasks.trigger", { items })) as { runs?: unknown } | null;
    return handles(what, got?.runs, items.length);
  };
  const triggerAndWait = async (what: string, items: Item[]): Promise<TaskRunResult[]> => {
    const r = (await ask("tasks.triggerAndWait", { items })) as { ok?: unknown; data?: unknown; canceled?: unknown; reason?: unknown } | null;
    if (r === null || typeof r !== "object") throw new Error(`${what}: malformed answer from the worker: ${JSON.stringify(r)}`);
    if (r.ok !== true) {
      const why = typeof r.reason === "string" && r.reason !== "" ? `: ${r.reason}` : "";
      throw new Error(`${what}: the wait for the child run(s) ended without their results${r.canceled === true ? ` (canceled${why})` : ""}`);
    }
    return results(what, r.data, items.length);
  };
  return Object.freeze({
    async trigger(task: TaskRef, payload?: unknown, options?: TriggerOptions) {
      const [h] = await trigger("tasks.trigger", [item("tasks.trigger", task, payload, options)]);
      return h!;
    },
    triggerAndWait(task: TaskRef, payload?: unknown, options?: TriggerOptions): TaskRunPromise {
      const p = (async () => {
        const [r] = await triggerAndWait("tasks.triggerAndWait", [item("tasks.triggerAndWait", task, payload, options)]);
        return r!;
      })();
      return Object.assign(p, { unwrap: () => p.then((r) => r.unwrap()) });
    },
    async batchTrigger(task: TaskRef, items: BatchItem[]) {
      return { runs: await trigger("tasks.batchTrigger", batch("tasks.batchTrigger", task, items)) };
    },
    async batchTriggerAndWait(task: TaskRef, items: BatchItem[]) {
      return { runs: await triggerAndWait("tasks.batchTriggerAndWait", batch("tasks.batchTriggerAndWait", task, items)) };
    },
  });
}

/** installTasks makes tasks available to @helmr/sdk for this run. */
export function installTasks(ask: Requester): void {
  Object.defineProperty(globalThis, TASKS_BRIDGE, { value: createTasks(ask), configurable: true, enumerable: false, writable: false });
}

function taskId(what: string, task: TaskRef): string {
  const id = typeof task === "string" ? task : (task as { id?: unknown } | null)?.id;
  if (typeof id !== "string" || id === "") throw new TypeError(`${what}: task must be a task (from task({ ... })) or a task id`);
  return id;
}

function batch(what: string, task: TaskRef, items: BatchItem[]): Item[] {
  if (!Array.isArray(items) || items.length === 0) throw new TypeError(`${what}: items must be a non-empty array of { payload, options }`);
  if (items.length > MAX_BATCH) throw new TypeError(`${what}: a batch has at most ${MAX_BATCH} items, got ${items.length}`);
  return items.map((it, i) => {
    if (it === null || typeof it !== "object") throw new TypeError(`${what}: item ${i} must be { payload, options }`);
    return item(`${what}: item ${i}`, task, it.payload, it.options);
  });
}

function item(what: string, task: TaskRef, payload: unknown, options: TriggerOptions | undefined): Item {
  const it: Item = { taskId: taskId(what, task) };
  if (payload !== undefined) {
    let json: string | undefined;
    try {
      json = JSON.stringify(payload);
    } catch (err) {
      throw new TypeError(`${what}: payload is not JSON-serializable: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (json === undefined) throw new TypeError(`${what}: payload is not JSON-serializable (a ${typeof payload})`);
    it.payload = JSON.parse(json) as unknown;
  }
  if (options !== undefined) {
    const o = runOptions(what, options);
    if (Object.keys(o).length > 0) it.options = o;
  }
  return it;
}

const optionNames = new Set(["idempotencyKey", "idempotencyKeyTTL", "tags", "queue", "concurrencyKey", "priority", "delay", "ttl", "secrets"]);

/** runOptions checks a child's options and returns them as the worker takes them. */
function runOptions(what: string, options: TriggerOptions): NonNullable<Item["options"]> {
  if (options === null || typeof options !== "object") throw new TypeError(`${what}: options must be an object`);
  for (const k of Object.keys(options)) {
    if (!optionNames.has(k)) throw new TypeError(`${what}: unknown option ${JSON.stringify(k)} (${[...optionNames].join(", ")})`);
  }
  const o: NonNullable<Item["options"]> = {};
  const str = (k: keyof TriggerOptions, v: unknown): string => {
    if (typeof v !== "string" || v === "") throw new TypeError(`${what}: ${k} must be a non-empty string`);
    return v;
  };
  if (options.idempotencyKey !== undefined) o.idempotencyKey = str("idempotencyKey", options.idempotencyKey);
  if (options.idempotencyKeyTTL !== undefined) o.idempotencyKeyTTL = duration(`${what}: idempotencyKeyTTL`, options.idempotencyKeyTTL);
  if (options.tags !== undefined) {
    const tags = typeof options.tags === "string" ? [options.tags] : options.tags;
    if (!Array.isArray(tags) || tags.some((t) => typeof t !== "string")) throw new TypeError(`${what}: tags must be a string or an array of strings`);
    o.tags = [...tags];
  }
  if (options.queue !== undefined) {
    const q = options.queue;
    o.queue = str("queue", typeof q === "object" && q !== null ? q.name : q);
  }
  if (options.concurrencyKey !== undefined) o.concurrencyKey = str("concurrencyKey", options.concurrencyKey);
  if (options.priority !== undefined) {
    if (!Number.isInteger(options.priority)) throw new TypeError(`${what}: priority must be a whole number`);
    o.priority = options.priority;
  }
  if (options.delay !== undefined) {
    const d = options.delay;
    if (d instanceof Date) {
      if (Number.isNaN(d.getTime())) throw new TypeError(`${what}: delay is an invalid Date`);
      o.delay = d.toISOString();
    } else {
      o.delay = duration(`${what}: delay`, d);
    }
  }
  if (options.ttl !== undefined) o.ttl = duration(`${what}: ttl`, options.ttl);
  if (options.secrets !== undefined) {
    const s = options.secrets;
    if (s === null || typeof s !== "object" || Object.values(s).some((v) => typeof v !== "string")) {
      throw new TypeError(`${what}: secrets must map secret names to "vault:NAME"`);
    }
    o.secrets = { ...s };
  }
  return o;
}

/**
 * duration turns seconds, or a duration string with units w, d, h, m, s
 * and ms ("1h30m", "2d"), into a Go duration the control plane parses
 * (Go's has no days or weeks). Any other string goes as it is (an RFC
 * 3339 time, for delay).
 */
export function duration(what: string, v: unknown): string {
  if (typeof v === "number") {
    if (!Number.isFinite(v) || v < 0) throw new TypeError(`${what} must be a number of seconds >= 0`);
    return `${v}s`;
  }
  if (typeof v !== "string" || v.trim() === "") throw new TypeError(`${what} must be a duration ("90s", "1h", "2d") or a number of seconds`);
  const s = v.trim();
  if (!/^(\d+(\.\d+)?(ms|w|d|h|m|s))+$/.test(s) || !/[wd]/.test(s)) return s;
  let ms = 0;
  for (const [, n, unit] of s.matchAll(/(\d+(?:\.\d+)?)(ms|w|d|h|m|s)/g)) {
    const f = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[unit as "ms"];
    ms += Number(n) * f;
  }
  return `${ms}ms`;
}

function handles(what: string, value: unknown, n: number): RunHandle[] {
  if (!Array.isArray(value) || value.length !== n) throw new Error(`${what}: malformed answer from the worker: ${JSON.stringify(value)}`);
  return value.map((r: { id?: unknown; taskId?: unknown } | null) => {
    if (r === null || typeof r !== "object" || typeof r.id !== "string" || typeof r.taskId !== "string") {
      throw new Error(`${what}: malformed answer from the worker: ${JSON.stringify(value)}`);
    }
    return { id: r.id, taskId: r.taskId };
  });
}

function results(what: string, value: unknown, n: number): TaskRunResult[] {
  if (!Array.isArray(value) || value.length !== n) throw new Error(`${what}: malformed answer from the worker: ${JSON.stringify(value)}`);
  return value.map((v: Record<string, unknown> | null) => {
    if (v === null || typeof v !== "object" || typeof v.id !== "string" || typeof v.taskId !== "string") {
      throw new Error(`${what}: malformed result from the worker: ${JSON.stringify(v)}`);
    }
    const id = v.id;
    const task = v.taskId;
    if (v.ok === true) {
      const output = v.output ?? null;
      return withUnwrap({ ok: true, id, taskId: task, output }, () => output);
    }
    const e = (v.error ?? {}) as Record<string, unknown>;
    const error: TaskRunError = {
      status: typeof v.status === "string" ? v.status : "FAILED",
      class: typeof e.class === "string" ? e.class : "",
      message: typeof e.message === "string" ? e.message : `the run ended ${String(v.status)}`,
    };
    if (typeof e.name === "string" && e.name !== "") error.name = e.name;
    if (typeof e.stack === "string" && e.stack !== "") error.stack = e.stack;
    return withUnwrap({ ok: false, id, taskId: task, error }, () => {
      throw new ChildRunError(id, task, error);
    });
  });
}

/** withUnwrap adds unwrap, not enumerable: the result stays plain data to JSON and comparisons. */
function withUnwrap<R extends object>(r: R, unwrap: () => unknown): TaskRunResult {
  Object.defineProperty(r, "unwrap", { value: unwrap, enumerable: false });
  return r as unknown as TaskRunResult;
}
