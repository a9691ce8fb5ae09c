import { TASK_BRAND, TASK_BRAND_VERSION, type TaskBrand } from "./brand.js";
import type { TaskContext } from "./context.js";
import { type Queue, type RetryOptions, queueManifest, retryManifest } from "./flow.js";
import { resolveInput, type FromSchema, type InputJsonSchema, type StandardSchemaV1, type TaskInput } from "./input.js";
import type { TaskDeclaration } from "./manifest-types.js";
import { Sandbox } from "./sandbox.js";
import { type SecretDeclaration, secretsManifest } from "./secrets.js";
import { assertName, describe } from "./validate.js";

/** A task's run logic: it receives the run's payload and context. */
export type TaskRunFunction<P, R> = (payload: P, ctx: TaskContext) => Promise<R> | R;

/** What task() takes. */
export interface TaskOptions<P, R> {
  /** The task id, unique within the project, such as "review-pr". */
  id: string;
  /** The sandbox the task runs in. */
  sandbox: Sandbox;
  /** The longest a run may take, in whole seconds; the server default when absent. */
  maxDuration?: number;
  /** Secrets the task uses, by name, and where each appears in the sandbox. */
  secrets?: Record<string, SecretDeclaration>;
  /**
   * The payload's schema: a JSON Schema object, or a Standard Schema
   * validator (zod, valibot, arktype) with a JSON Schema export. Helmr
   * refuses a trigger whose payload does not fit (400, naming the field),
   * and a validator also parses the payload in the sandbox before run.
   */
  input?: TaskInput;
  /** The run logic. A task without run can be deployed but not run. */
  run?: TaskRunFunction<P, R>;
  /** Retry failed runs (task errors, a lost worker); absent: one attempt. */
  retry?: RetryOptions;
  /** The queue the task's runs wait in: queue(...) or { name, concurrencyLimit }. */
  queue?: Queue | { name: string; concurrencyLimit?: number };
}

/** TaskOptions with a Standard Schema input: run gets the validator's output. */
export type TaskOptionsWithSchema<S extends StandardSchemaV1, R> = Omit<TaskOptions<StandardSchemaV1.InferOutput<S>, R>, "input"> & {
  input: S;
};

/** TaskOptions with a JSON Schema input: run's payload is typed from the schema (FromSchema). */
export type TaskOptionsWithJsonSchema<S extends InputJsonSchema, R> = Omit<TaskOptions<FromSchema<S>, R>, "input"> & { input: S };

/** A declared task. P is the payload type, R what run resolves to. */
export interface Task<P = unknown, R = unknown> {
  readonly id: string;
  readonly sandbox: Sandbox;
  readonly maxDuration: number | undefined;
  readonly secrets: Readonly<Record<string, SecretDeclaration>>;
  readonly run: TaskRunFunction<P, R> | undefined;
  readonly [TASK_BRAND]: TaskBrand;
}

/** TaskPayload is the payload type of a task. */
export type TaskPayload<T> = T extends Task<infer P, unknown> ? P : never;

/** TaskOutput is what a task's run resolves to. */
export type TaskOutput<T> = T extends Task<never, infer R> ? Awaited<R> : never;

/**
 * task declares a task. Export it from a module under one of the project's
 * dirs; the export's name and module path locate it in the deployment.
 *
 * With input, run's payload is typed from it: a validator's output type,
 * or what a JSON Schema literal describes (FromSchema; or say it:
 * task<{ repo: string }>({ input: schema, ... })).
 */
export function task<S extends StandardSchemaV1, R = unknown>(
  options: TaskOptionsWithSchema<S, R>,
): Task<StandardSchemaV1.InferInput<S>, R>;
export function task<const S extends InputJsonSchema, R = unknown>(options: TaskOptionsWithJsonSchema<S, R>): Task<FromSchema<S>, R>;
export function task<P = void, R = unknown>(options: TaskOptions<P, R>): Task<P, R>;
export function task<P, R>(options: TaskOptions<P, R>): Task<P, R> {
  const { id, sandbox, maxDuration, secrets = {}, input, retry, queue } = options;
  let { run } = options;
  assertName("task id", id);
  if (!(sandbox instanceof Sandbox)) {
    throw new TypeError(`task "${id}" sandbox must be a sandbox(...), got ${describe(sandbox)}`);
  }
  if (maxDuration !== undefined && (!Number.isInteger(maxDuration) || maxDuration <= 0)) {
    throw new TypeError(`task "${id}" maxDuration must be a positive whole number of seconds, got ${describe(maxDuration)}`);
  }
  if (run !== undefined && typeof run !== "function") {
    throw new TypeError(`task "${id}" run must be a function, got ${describe(run)}`);
  }
  if (secrets === null || typeof secrets !== "object") {
    throw new TypeError(`task "${id}" secrets must be an object, got ${describe(secrets)}`);
  }

  // Serialize once, now: the builders are immutable, and a bad declaration
  // should fail when the module is indexed.
  const secretTargets = secretsManifest(id, secrets);
  const resolved = input === undefined ? undefined : resolveInput(id, input);
  const parse = resolved?.parse;
  if (parse && run) {
    // A validator parses the payload before run (its defaults and
    // transforms apply); the control plane checked it against the JSON
    // Schema already.
    const declared = run;
    run = async function (this: unknown, payload, ctx) {
      return declared.call(this, (await parse(payload)) as P, ctx);
    };
  }
  const declaration: TaskDeclaration = {
    id,
    ...(maxDuration !== undefined ? { maxDuration } : {}),
    ...(Object.keys(secretTargets).length > 0 ? { secrets: secretTargets } : {}),
    sandbox: sandbox.toManifest(),
    hasRun: typeof run === "function",
    ...(retry !== undefined ? { retry: retryManifest(`task "${id}"`, retry) } : {}),
    ...(queue !== undefined ? { queue: queueManifest(`task "${id}"`, queue) } : {}),
    ...(resolved ? { input: resolved.jsonSchema } : {}),
  };
  const json = JSON.stringify(declaration);
  const brand: TaskBrand = Object.freeze({
    version: TASK_BRAND_VERSION,
    manifest: () => JSON.parse(json) as TaskDeclaration,
  });

  return Object.freeze({
    id,
    sandbox,
    maxDuration,
    secrets: Object.freeze({ ...secrets }),
    run,
    [TASK_BRAND]: brand,
  });
}
