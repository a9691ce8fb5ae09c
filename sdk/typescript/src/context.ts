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

/** Options of ctx.wait.human and ctx.wait.human.result. */
export interface HumanWaitOptions {
  /** What the person answering sees (helmr runs show, the run's events). */
  displayText: string;
  /** How long to wait before the wait times out; absent: until answered. */
  timeout?: WaitDuration;
  /**
   * The expected shape of the answer (JSON Schema). Helmr checks its
   * top-level `type`, `required`, the `type` of listed `properties` and a
   * top-level `enum` before the run resumes; an answer that does not fit
   * is refused.
   */
  schema?: JsonSchema;
}

/** Options of ctx.wait.createToken. */
export interface CreateTokenOptions {
  /** How long until the token times out; absent: never. */
  timeout?: WaitDuration;
  /** Makes creation idempotent in the project environment. */
  idempotencyKey?: string;
  /** Tags to find the token by. */
  tags?: string[];
}

/** A wait token that an API call (or a person) completes. */
export interface WaitToken {
  id: string;
  /**
   * The URL that completes the token with a POSTed JSON body, without
   * credentials (it carries a secret: treat it as one). Absent when an
   * idempotency key returned an existing token.
   */
  url?: string;
}

/** Options of ctx.wait.forToken. */
export interface ForTokenOptions {
  /** Stop waiting after this long ({ ok: false, timedOut: true }); the token stays open. */
  timeout?: WaitDuration;
}

/**
 * How a wait ended: completed with data, timed out, or canceled (a token
 * canceled through the API, or a human wait rejected with helmr reject).
 * What ctx.wait.forToken and ctx.wait.human.result resolve to.
 */
export type WaitResult<T> =
  | { ok: true; data: T; timedOut?: undefined; canceled?: undefined }
  | { ok: false; timedOut: true; canceled?: undefined }
  | { ok: false; canceled: true; reason?: string; timedOut?: undefined };

/**
 * ctx.wait.human asks a person (helmr approve / reject RUN) and resolves
 * with their answer:
 *
 *     const decision = await ctx.wait.human<{ approved: boolean }>({ displayText: "Post it?" })
 *     if (decision.approved) { ... }
 *
 * If the wait ends without an answer it throws: a WaitTimeoutError when
 * its timeout passes, a WaitRejectedError (with the reason) when the
 * person rejects it; both are WaitErrors. T is what the task expects, not
 * checked at run time: declare a schema to have Helmr refuse answers of
 * another shape. human.result resolves with a WaitResult instead of
 * throwing.
 */
export interface HumanWait {
  <T = unknown>(options: HumanWaitOptions): Promise<T>;
  /** result asks as human does and resolves with how the wait ended, never throwing for a timeout or a rejection. */
  result<T = unknown>(options: HumanWaitOptions): Promise<WaitResult<T>>;
}

/**
 * Waits: the run is WAITING until someone answers or a timer fires. Time
 * spent waiting does not count against the task's maxDuration.
 */
export interface Wait {
  /** human asks a person and resolves with the answer, or throws a WaitError (see HumanWait). */
  human: HumanWait;
  /** createToken creates a token that an API call completes later. */
  createToken(options?: CreateTokenOptions): Promise<WaitToken>;
  /** forToken waits until the token is completed, canceled or timed out, and resolves with which (it does not throw for those). */
  forToken<T = unknown>(token: string | WaitToken, options?: ForTokenOptions): Promise<WaitResult<T>>;
  /** for waits for a duration. */
  for(duration: WaitDuration): Promise<void>;
  /** until waits until a point in time. */
  until(date: Date): Promise<void>;
}

/** Options of ctx.session.output.append. */
export interface AppendOptions {
  /**
   * Makes the append idempotent: a repeat with the same key and data is
   * stored once. Absent: a fresh key per call.
   */
  idempotencyKey?: string;
}

/** A run's session output: what clients read (helmr sessions, the runtime client's sessions.readOutput). */
export interface SessionOutput {
  /** append adds a record (any JSON value) and resolves with its sequence number once stored. */
  append(data: unknown, options?: AppendOptions): Promise<{ seq: number }>;
}

/**
 * A run's session: input that clients send while it runs, and output it
 * appends. Iterating input yields each record's data once, in order,
 * waiting for more; it never ends by itself (break out when done), and a
 * later iteration continues where the last one stopped. Waiting for input
 * keeps the run RUNNING (its maxDuration clock runs).
 */
export interface Session {
  input: AsyncIterable<unknown>;
  output: SessionOutput;
}

/** Metadata stored with the run and shown in the run API (GET /v1/runs/{id}). */
export interface Metadata {
  /** set stores value (any JSON, at most 64 KiB) under key (1-128 characters). */
  set(key: string, value: unknown): Promise<void>;
  /** get returns what this run set under key (undefined if nothing). */
  get(key: string): unknown;
}

/** The second argument of a task's run function. */
export interface TaskContext {
  run: RunInfo;
  logger: Logger;
  wait: Wait;
  session: Session;
  metadata: Metadata;
}
