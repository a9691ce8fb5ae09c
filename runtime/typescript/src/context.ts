import { inspect } from "node:util";

import type { Method, MethodParams, RunInfo } from "./protocol.js";
import { createMetadata, createSession, type AdapterMetadata, type AdapterSession } from "./session.js";
import { WaitRejectedError, WaitTimeoutError } from "./wait-errors.js";

// The ctx a task's run receives. Its shape is @helmr/sdk's TaskContext; the
// runtime tests check that the two stay assignable.

type Attributes = Record<string, unknown>;

/** A relative duration, as @helmr/sdk's WaitDuration. */
export type Duration = { seconds: number } | { minutes: number } | { hours: number };

/** How a wait ended, as @helmr/sdk's WaitResult. */
export type WaitResult<T> =
  | { ok: true; data: T; timedOut?: undefined; canceled?: undefined }
  | { ok: false; timedOut: true; canceled?: undefined }
  | { ok: false; canceled: true; reason?: string; timedOut?: undefined };

/** Options of ctx.wait.human, as @helmr/sdk's HumanWaitOptions. */
export type HumanOptions = { displayText: string; timeout?: Duration; schema?: Record<string, unknown> };

/** Sends a request to the worker and resolves with its answer (Channel.request). */
export type Requester = <M extends Method>(method: M, params: MethodParams[M]) => Promise<unknown>;

/** What the adapter passes to run as its second argument. */
export interface AdapterContext {
  run: RunInfo;
  logger: {
    info(message: string, attributes?: Attributes): void;
    warn(message: string, attributes?: Attributes): void;
    error(message: string, attributes?: Attributes): void;
  };
  wait: {
    human: {
      <T = unknown>(options: HumanOptions): Promise<T>;
      result<T = unknown>(options: HumanOptions): Promise<WaitResult<T>>;
    };
    createToken(options?: { timeout?: Duration; idempotencyKey?: string; tags?: string[] }): Promise<{ id: string; url?: string }>;
    forToken<T = unknown>(token: string | { id: string }, options?: { timeout?: Duration }): Promise<WaitResult<T>>;
    for(duration: Duration): Promise<void>;
    until(date: Date): Promise<void>;
  };
  session: AdapterSession;
  metadata: AdapterMetadata;
}

/** What settle(ctx) waits for, by ctx. */
const settlers = new WeakMap<object, () => Promise<void>>();

/** settle resolves once ctx's output appends under way are answered. */
export function settle(ctx: AdapterContext): Promise<void> {
  return settlers.get(ctx)?.() ?? Promise.resolve();
}

/**
 * createContext builds ctx for one run. Waits, session streams and metadata
 * are requests to the worker over request; without one (no worker) they
 * reject.
 */
export function createContext(run: RunInfo, request?: Requester): AdapterContext {
  const ask: Requester =
    request ?? ((method) => Promise.reject(new Error(`ctx.${method} needs the Helmr worker: this adapter has no channel`)));
  const { session, settle: settleSession } = createSession(ask);
  const humanResult = async <T>(options: HumanOptions): Promise<WaitResult<T>> =>
    waitResult<T>(await ask("wait.human", humanParams(options)), "ctx.wait.human");
  const human = async <T>(options: HumanOptions): Promise<T> => {
    const params = humanParams(options);
    const r = waitResult<T>(await ask("wait.human", params), "ctx.wait.human");
    if (r.ok) return r.data;
    throw humanWaitError(r, params);
  };
  const ctx: AdapterContext = {
    run: Object.freeze({ ...run }),
    logger: Object.freeze({
      info: (message: string, attributes?: Attributes) => console.log(logLine(message, attributes)),
      warn: (message: string, attributes?: Attributes) => console.warn(logLine(message, attributes)),
      error: (message: string, attributes?: Attributes) => console.error(logLine(message, attributes)),
    }),
    wait: Object.freeze({
      human: Object.freeze(Object.assign(human, { result: humanResult })),
      async createToken(options: { timeout?: Duration; idempotencyKey?: string; tags?: string[] } = {}) {
        const params: MethodParams["wait.createToken"] = {};
        if (options.timeout !== undefined) params.timeoutSeconds = seconds(options.timeout, "ctx.wait.createToken: timeout");
        if (options.idempotencyKey !== undefined) {
          if (typeof options.idempotencyKey !== "string") throw new TypeError("ctx.wait.createToken: idempotencyKey must be a string");
          params.idempotencyKey = options.idempotencyKey;
        }
        if (options.tags !== undefined) {
          if (!Array.isArray(options.tags) || options.tags.some((t) => typeof t !== "string")) {
            throw new TypeError("ctx.wait.createToken: tags must be an array of strings");
          }
          params.tags = options.tags;
        }
        const got = (await ask("wait.createToken", params)) as { id?: unknown; url?: unknown } | null;
        if (got === null || typeof got !== "object" || typeof got.id !== "string") {
          throw new Error(`ctx.wait.createToken: malformed answer from the worker: ${JSON.stringify(got)}`);
        }
        return typeof got.url === "string" && got.url !== "" ? { id: got.id, url: got.url } : { id: got.id };
      },
      async forToken<T>(token: string | { id: string }, options: { timeout?: Duration } = {}) {
        const id = typeof token === "string" ? token : token?.id;
        if (typeof id !== "string" || id === "") throw new TypeError("ctx.wait.forToken: token must be a token id or { id }");
        const params: MethodParams["wait.forToken"] = { token: id };
        if (options.timeout !== undefined) params.timeoutSeconds = seconds(options.timeout, "ctx.wait.forToken: timeout");
        return waitResult<T>(await ask("wait.forToken", params), "ctx.wait.forToken");
      },
      async for(duration: Duration) {
        await ask("wait.for", { seconds: seconds(duration, "ctx.wait.for") });
      },
      async until(date: Date) {
        if (!(date instanceof Date) || Number.isNaN(date.getTime())) throw new TypeError("ctx.wait.until: date must be a valid Date");
        await ask("wait.until", { until: date.toISOString() });
      },
    }),
    session,
    metadata: createMetadata(ask),
  };
  settlers.set(ctx, settleSession);
  return ctx;
}

/** humanParams checks ctx.wait.human's options and returns its request's params. */
function humanParams(options: HumanOptions): MethodParams["wait.human"] {
  if (options === null || typeof options !== "object" || typeof options.displayText !== "string" || options.displayText.trim() === "") {
    throw new TypeError("ctx.wait.human: displayText must be a non-empty string");
  }
  if (options.schema !== undefined && (options.schema === null || typeof options.schema !== "object" || Array.isArray(options.schema))) {
    throw new TypeError("ctx.wait.human: schema must be a JSON Schema object");
  }
  const params: MethodParams["wait.human"] = { displayText: options.displayText };
  if (options.timeout !== undefined) params.timeoutSeconds = seconds(options.timeout, "ctx.wait.human: timeout");
  if (options.schema !== undefined) params.schema = options.schema;
  return params;
}

/** humanWaitError is what ctx.wait.human throws for a wait that ended without an answer. */
function humanWaitError(r: Exclude<WaitResult<unknown>, { ok: true }>, params: MethodParams["wait.human"]): Error {
  const text = params.displayText.length > 80 ? `${params.displayText.slice(0, 79)}…` : params.displayText;
  const what = `human wait ${JSON.stringify(text)}`;
  if (r.timedOut) {
    return new WaitTimeoutError(params.timeoutSeconds !== undefined ? `${what} timed out after ${params.timeoutSeconds}s` : `${what} timed out`);
  }
  // helmr reject without --reason says "rejected": no need to say it twice.
  const why = r.reason !== undefined && r.reason !== "rejected" ? `: ${r.reason}` : "";
  return new WaitRejectedError(r.reason, `${what} was rejected${why}`);
}

/** seconds converts a { seconds | minutes | hours } duration, rejecting anything else. */
export function seconds(d: unknown, what: string): number {
  const o = d as Record<string, unknown> | null;
  if (o === null || typeof o !== "object") throw new TypeError(`${what} must be { seconds }, { minutes } or { hours }`);
  const units: Array<[string, number]> = [
    ["seconds", 1],
    ["minutes", 60],
    ["hours", 3600],
  ];
  const given = units.filter(([k]) => o[k] !== undefined);
  if (given.length !== 1) throw new TypeError(`${what} must have exactly one of seconds, minutes or hours`);
  const [unit, factor] = given[0]!;
  const n = o[unit];
  if (typeof n !== "number" || !Number.isFinite(n) || n < 0) throw new TypeError(`${what}: ${unit} must be a finite number >= 0`);
  return n * factor;
}

/** waitResult checks the worker's answer to a wait and returns it typed. */
function waitResult<T>(value: unknown, what: string): WaitResult<T> {
  const r = value as { ok?: unknown; data?: unknown; timedOut?: unknown; canceled?: unknown; reason?: unknown } | null;
  if (r !== null && typeof r === "object") {
    if (r.ok === true) return { ok: true, data: r.data as T };
    if (r.ok === false && r.timedOut === true) return { ok: false, timedOut: true };
    if (r.ok === false && r.canceled === true) {
      return typeof r.reason === "string" && r.reason !== "" ? { ok: false, canceled: true, reason: r.reason } : { ok: false, canceled: true };
    }
  }
  throw new Error(`${what}: malformed answer from the worker: ${JSON.stringify(value)}`);
}

function logLine(message: string, attributes?: Attributes): string {
  const text = String(message);
  if (attributes === undefined || Object.keys(attributes).length === 0) return text;
  try {
    return `${text} ${JSON.stringify(attributes)}`;
  } catch {
    return `${text} ${inspect(attributes, { depth: 4, breakLength: Infinity })}`;
  }
}
