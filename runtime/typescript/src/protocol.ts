// The adapter channel protocol: newline-delimited JSON over fd 3, one object
// per line, in both directions between the guest agent and the adapter.
// proto/adapter-channel.schema.json describes every message and method, with
// examples in proto/adapter-channel.golden.json; test/schema.test.ts checks
// this side's encodings against both (internal/agent/channel the worker's).
//
//   agent -> adapter  {"type":"start","module":"/opt/helmr/task/tasks/x.mjs","export":"x","payload":...,"run":{"id":"...","taskId":"..."}}
//   adapter -> agent  {"type":"result","output":<JSON>}                     exactly one of these two,
//   adapter -> agent  {"type":"error","name":"...","message":"...","stack":"..."}   then the adapter exits
//
// Requests from the adapter (ctx.wait.*) carry an id that the answer echoes;
// the worker answers them through the agent:
//
//   adapter -> agent  {"type":"request","id":1,"method":"wait.human","params":{...}}
//   agent -> adapter  {"type":"response","id":1,"result":...} or {"type":"response","id":1,"error":{"message":"..."}}
//
// Methods and params (durations in seconds):
//   wait.human        {displayText, timeoutSeconds?, schema?}   -> WaitResult
//   wait.createToken  {timeoutSeconds?, idempotencyKey?, tags?}  -> {id, url}
//   wait.forToken     {token, timeoutSeconds?}                   -> WaitResult
//   wait.for          {seconds}                                  -> null
//   wait.until        {until: ISO date}                          -> null
//   session.input.next     {after}        -> {records: [{seq, data, ...}]}, once there are records after seq after
//   session.output.append  {id, data}     -> {seq}   (id: the idempotency key)
//   metadata.set           {key, value}   -> null
//   tasks.trigger          {items: [{taskId, payload?, options?}]} -> {runs: [{id, taskId, created}]}
//   tasks.triggerAndWait   {items: [...]}  -> WaitResult whose data is [{ok, id, taskId, status, output?, error?}], once all ended
// WaitResult: {ok:true,data} | {ok:false,timedOut:true} | {ok:false,canceled:true,reason?}

/** The message types ("type"). */
export const messageTypes = ["start", "result", "error", "request", "response"] as const;

/** A message's "type". */
export type MessageType = (typeof messageTypes)[number];

/** The params of each request method. */
export interface MethodParams {
  "wait.human": { displayText: string; timeoutSeconds?: number; schema?: Record<string, unknown> };
  "wait.createToken": { timeoutSeconds?: number; idempotencyKey?: string; tags?: string[] };
  "wait.forToken": { token: string; timeoutSeconds?: number };
  "wait.for": { seconds: number };
  "wait.until": { until: string };
  "session.input.next": { after: number };
  "session.output.append": { id: string; data: unknown };
  "metadata.set": { key: string; value: unknown };
  "tasks.trigger": { items: ChildItem[] };
  "tasks.triggerAndWait": { items: ChildItem[] };
}

/** One run to trigger as a child (tasks.*); durations are Go-style ("90s", "1h"). */
export interface ChildItem {
  taskId: string;
  payload?: unknown;
  options?: {
    idempotencyKey?: string;
    idempotencyKeyTTL?: string;
    tags?: string[];
    queue?: string;
    concurrencyKey?: string;
    priority?: number;
    delay?: string;
    ttl?: string;
    secrets?: Record<string, string>;
  };
}

/** A request's "method". */
export type Method = keyof MethodParams;

/** The request methods, every key of MethodParams. */
export const methods = [
  "wait.human",
  "wait.createToken",
  "wait.forToken",
  "wait.for",
  "wait.until",
  "session.input.next",
  "session.output.append",
  "metadata.set",
  "tasks.trigger",
  "tasks.triggerAndWait",
] as const satisfies readonly Method[];

// Compile-time checks: methods lists every method, and messageTypes every
// type of Message.
type Missing<All, Listed> = [Exclude<All, Listed>] extends [never] ? true : Exclude<All, Listed>;
export const everyMethodListed: Missing<Method, (typeof methods)[number]> = true;
export const everyTypeListed: Missing<Message["type"], MessageType> & Missing<MessageType, Message["type"]> = true;

/** The run being executed, as the agent describes it. */
export interface RunInfo {
  id: string;
  taskId: string;
  attempt?: number;
}

/** The first message: which task to run with which payload. */
export interface StartMessage {
  type: "start";
  /** Absolute path (or file: URL) of the bundled task module inside the guest. */
  module: string;
  /** The module's export holding the task. */
  export: string;
  /** The run's payload; absent means undefined. */
  payload?: unknown;
  run: RunInfo;
  /**
   * Variables the run adds to process.env before the task loads (the
   * adapter may have started before its run was known).
   */
  env?: Record<string, string>;
}

/** The run's outcome: run's return value (null for undefined). */
export interface ResultMessage {
  type: "result";
  output: unknown;
}

/** The run failed: a thrown value, an import failure or a bad task. */
export interface ErrorMessage {
  type: "error";
  name: string;
  message: string;
  stack: string;
}

/** A request from the adapter that the agent answers with the same id. */
export interface RequestMessage {
  type: "request";
  id: number;
  method: Method;
  params: MethodParams[Method];
}

/** The agent's answer to a request. */
export interface ResponseMessage {
  type: "response";
  id: number;
  result?: unknown;
  error?: { message: string; name?: string };
}

/** Any message on the channel. */
export type Message = StartMessage | ResultMessage | ErrorMessage | RequestMessage | ResponseMessage;

/** parseStart checks that value is a well-formed start message. */
export function parseStart(value: unknown): StartMessage {
  const m = value as Partial<StartMessage> | null;
  if (m === null || typeof m !== "object" || m.type !== "start") {
    throw new Error(`expected a start message, got ${JSON.stringify(value)?.slice(0, 200)}`);
  }
  if (typeof m.module !== "string" || m.module === "") throw new Error("start message: module must be a non-empty string");
  if (typeof m.export !== "string" || m.export === "") throw new Error("start message: export must be a non-empty string");
  const run = m.run as Partial<RunInfo> | undefined;
  if (run === null || typeof run !== "object" || typeof run.id !== "string" || typeof run.taskId !== "string") {
    throw new Error("start message: run must be { id, taskId }");
  }
  const info: RunInfo = { id: run.id, taskId: run.taskId };
  if (typeof run.attempt === "number") info.attempt = run.attempt;
  const start: StartMessage = { type: "start", module: m.module, export: m.export, payload: m.payload, run: info };
  if (m.env !== undefined) {
    if (m.env === null || typeof m.env !== "object" || Object.values(m.env).some((v) => typeof v !== "string")) {
      throw new Error("start message: env must map names to strings");
    }
    start.env = { ...m.env };
  }
  return start;
}
