import type { JSONBody, Operation } from "./api.js";
import type { Transport } from "./http.js";
import type { BulkFilter, BulkResult, ReplayOverrides, Run, RunPage, RunStatus, Scope } from "./types.js";

/** Options of runs.trigger. */
export interface TriggerOptions extends Scope {
  /** A repeat with the same key returns the first run (and may be retried safely). */
  idempotencyKey?: string;
  /** Binds the task's declared secrets: name → "vault:NAME". */
  secrets?: Record<string, string>;
  /** Attach the run to this workspace; absent: a new one. */
  workspaceId?: string;
  /** The queue to wait in (default: the task's). */
  queue?: string;
  /** Splits the queue's concurrency limit per key (a tenant). */
  concurrencyKey?: string;
  /** Higher starts first within its queue (-1000 to 1000). */
  priority?: number;
  /** Labels (at most 10), filterable. */
  tags?: string[];
  /** Start no sooner: a duration ("10m") or a Date. */
  delay?: string | Date;
  /** A run not started within this duration ("1h") ends EXPIRED. */
  ttl?: string;
  /** How long idempotencyKey returns the same run ("24h"). */
  idempotencyKeyTTL?: string;
  /** Size this run's sandbox within its declared limits. */
  machine?: { cpu?: number; memory?: string };
}

/** Filters of runs.list. */
export interface ListRunsOptions extends Scope {
  task?: string;
  status?: RunStatus;
  kind?: "task" | "build";
  tag?: string;
  queue?: string;
  limit?: number;
  cursor?: string;
}

/** Options of runs.bulkCancel and runs.bulkReplay: a filter (at least one field), the scope. */
export type BulkOptions = BulkFilter & Scope;

/** Runs: trigger, retrieve, list, cancel and replay, one at a time or in bulk. */
export class Runs {
  readonly #t: Transport;
  readonly #scope: (s?: Scope) => { project: string; env: string };

  constructor(t: Transport, scope: (s?: Scope) => { project: string; env: string }) {
    this.#t = t;
    this.#scope = scope;
  }

  /** trigger starts a run of the task's latest deployment (needs runs:create). */
  trigger(taskId: string, payload?: unknown, options: TriggerOptions = {}): Promise<Run> {
    const body: JSONBody<Operation<"POST", "/v1/tasks/{id}/runs">> = { payload: payload ?? null };
    if (options.idempotencyKey !== undefined) body.idempotencyKey = options.idempotencyKey;
    if (options.secrets !== undefined) body.secrets = options.secrets;
    if (options.workspaceId !== undefined) body.workspaceId = options.workspaceId;
    if (options.queue !== undefined) body.queue = options.queue;
    if (options.concurrencyKey !== undefined) body.concurrencyKey = options.concurrencyKey;
    if (options.priority !== undefined) body.priority = options.priority;
    if (options.tags !== undefined) body.tags = options.tags;
    if (options.delay !== undefined) body.delay = options.delay instanceof Date ? options.delay.toISOString() : options.delay;
    if (options.ttl !== undefined) body.ttl = options.ttl;
    if (options.idempotencyKeyTTL !== undefined) body.idempotencyKeyTTL = options.idempotencyKeyTTL;
    if (options.machine !== undefined) body.machine = options.machine;
    return this.#t.call("POST", "/v1/tasks/{id}/runs", {
      path: { id: taskId },
      query: this.#scope(options),
      body,
      idempotent: options.idempotencyKey !== undefined,
    });
  }

  /** retrieve returns a run with its metadata and what it waits on (needs runs:read). */
  retrieve(id: string): Promise<Run> {
    return this.#t.call("GET", "/v1/runs/{id}", { path: { id }, idempotent: true });
  }

  /** list returns a page of runs, newest first (needs runs:read). */
  list(options: ListRunsOptions = {}): Promise<RunPage> {
    const { task, status, kind, tag, queue, limit, cursor } = options;
    return this.#t.call("GET", "/v1/runs", { query: { ...this.#scope(options), task, status, kind, tag, queue, limit, cursor }, idempotent: true });
  }

  /** cancel ends a run that has not finished (needs runs:manage; a finished run is a ConflictError). */
  cancel(id: string): Promise<Run> {
    return this.#t.call("POST", "/v1/runs/{id}/cancel", { path: { id } });
  }

  /**
   * replay starts a new run of a run's task with its payload, secret bindings,
   * queue, concurrency key, priority and tags, except those overrides gives;
   * the new run's replayOf names the original (needs runs:create).
   */
  replay(id: string, overrides: ReplayOverrides = {}): Promise<Run> {
    return this.#t.call("POST", "/v1/runs/{id}/replay", {
      path: { id },
      body: overrides,
      idempotent: overrides.idempotencyKey !== undefined,
    });
  }

  /**
   * bulkCancel cancels the runs a filter selects, at most limit (1000) a call;
   * runs that ended are skipped. When more match, pass nextCursor as cursor
   * (needs runs:manage).
   */
  bulkCancel(options: BulkOptions): Promise<BulkResult> {
    const { project: _p, env: _e, ...filter } = options;
    return this.#t.call("POST", "/v1/runs/bulk/cancel", { query: this.#scope(options), body: filter });
  }

  /** bulkReplay replays the runs a filter selects, each with the same overrides (needs runs:create). */
  bulkReplay(options: BulkOptions, overrides?: ReplayOverrides): Promise<BulkResult> {
    const { project: _p, env: _e, ...filter } = options;
    return this.#t.call("POST", "/v1/runs/bulk/replay", { query: this.#scope(options), body: { ...filter, overrides } });
  }
}
