// The context a task's run function receives. The guest adapter
// (runtime/typescript) implements it; these are the types task code sees.

/** The run being executed. */
export interface RunInfo {
  /** The run's id, such as "run_..." */
  id: string;
  /** The task id the run executes. */
  taskId: string;
  /** The attempt number, starting at 1, where the runtime reports it. */
  attempt?: number;
}

/** Structured attributes attached to a log line. */
export type LogAttributes = Record<string, unknown>;

/** Logs from task code; each line becomes a run log event. */
export interface Logger {
  info(message: string, attributes?: LogAttributes): void;
  warn(message: string, attributes?: LogAttributes): void;
  error(message: string, attributes?: LogAttributes): void;
}

/** A relative duration for waits and timeouts. */
export type WaitDuration =
  | { seconds: number; minutes?: never; hours?: never }
  | { minutes: number; seconds?: never; hours?: never }
  | { hours: number; seconds?: never; minutes?: never };

/** A JSON Schema describing the shape of an expected answer. */
export type JsonSchema = Record<string, unknown>;

/** Options of ctx.wait.human. */
export interface HumanWaitOptions {
  /** What the person answering sees. */
  displayText: string;
  /** How long to wait before the wait fails; the server default when absent. */
  timeout?: WaitDuration;
  /** The expected shape of the answer, checked before the run resumes. */
  schema?: JsonSchema;
}

/** Options of ctx.wait.createToken. */
export interface CreateTokenOptions {
  timeout?: WaitDuration;
  /** Tags to find the token by. */
  tags?: string[];
}

/** A wait token that an API call (or a person) completes. */
export interface WaitToken {
  id: string;
  /** The URL that completes the token with a POSTed JSON body. */
  url?: string;
}

/** Options of ctx.wait.forToken. */
export interface ForTokenOptions {
  timeout?: WaitDuration;
}

/** Waits park the run until someone answers or a timer fires. */
export interface Wait {
  /** human asks a person and resolves with their answer. */
  human<T = unknown>(options: HumanWaitOptions): Promise<T>;
  /** createToken creates a token that an API call completes later. */
  createToken(options?: CreateTokenOptions): Promise<WaitToken>;
  /** forToken waits until the token is completed and resolves with its data. */
  forToken<T = unknown>(token: string | WaitToken, options?: ForTokenOptions): Promise<T>;
  /** for waits for a duration. */
  for(duration: WaitDuration): Promise<void>;
  /** until waits until a point in time. */
  until(date: Date): Promise<void>;
}

/** The second argument of a task's run function. */
export interface TaskContext {
  run: RunInfo;
  logger: Logger;
  wait: Wait;
}
