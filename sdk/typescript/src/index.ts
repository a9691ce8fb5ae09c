// @helmr/sdk: declare images, sandboxes and tasks for Helmr; HelmrClient
// (also @helmr/sdk/client) calls the API from code outside tasks.

export { cache, type Cache } from "./cache.js";
export { defineConfig, type Config } from "./config.js";
export type {
  AppendOptions,
  CreateTokenOptions,
  ForTokenOptions,
  HumanWait,
  HumanWaitOptions,
  JsonSchema,
  LogAttributes,
  Logger,
  Metadata,
  RunInfo,
  Session,
  SessionOutput,
  TaskContext,
  Wait,
  WaitDuration,
  WaitResult,
  WaitToken,
} from "./context.js";
export { WaitError, WaitRejectedError, WaitTimeoutError, type WaitErrorKind } from "./wait-errors.js";
export {
  TaskInputError,
  withJsonSchema,
  type FromSchema,
  type InputJsonSchema,
  type InputPayload,
  type StandardSchemaV1,
  type TaskInput,
} from "./input.js";
export { image, Image, type BuildSecret, type CacheMount, type CopyOptions, type FromOptions, type RunOptions } from "./image.js";
export { sandbox, Sandbox, type MemorySize, type Resources } from "./sandbox.js";
export type { DirectorySecret, EnvSecret, FileMode, FileSecret, SecretDeclaration, SecretEgress } from "./secrets.js";
export { schedules, type CronExpression, type ScheduledTaskOptions, type ScheduledTaskPayload } from "./schedules.js";
export { source, type Source } from "./source.js";
export {
  task,
  type Task,
  type TaskOptions,
  type TaskOptionsWithJsonSchema,
  type TaskOptionsWithSchema,
  type TaskOutput,
  type TaskPayload,
  type TaskRunFunction,
} from "./task.js";
export {
  BadRequestError,
  ConflictError,
  ConnectionError,
  ForbiddenError,
  HelmrApiError,
  HelmrClient,
  NotFoundError,
  PayloadTooLargeError,
  RateLimitError,
  ServerError,
  UnauthorizedError,
  UnprocessableEntityError,
  type HelmrClientOptions,
  type SessionRecord,
} from "./client/index.js";
export { AbortTaskRunError, queue } from "./flow.js";
export {
  ChildRunError,
  tasks,
  type AnyTask,
  type BatchHandle,
  type BatchItem,
  type BatchResult,
  type RunHandle,
  type TaskIdentifier,
  type TaskRunError,
  type TaskRunPromise,
  type TaskRunResult,
  type Tasks,
  type TriggerArgs,
  type TriggerOptions,
} from "./tasks.js";
export type { Queue, RetryOptions } from "./flow.js";
