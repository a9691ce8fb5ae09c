import type { Transport } from "./http.js";
import type { Schedule, SchedulePage, Scope } from "./types.js";

/** Options of schedules.create. */
export interface CreateScheduleOptions extends Scope {
  /** The deployed task it runs. */
  task: string;
  /** Five fields, six with leading seconds ("*\/30 * * * * *"), or @daily and the like. */
  cron: string;
  /** The IANA zone the cron is read in; default UTC. */
  timezone?: string;
  /** Your reference (a user or tenant id); each run's payload carries it. */
  externalId?: string;
  /** Creating again with this key updates the schedule that holds it. */
  deduplicationKey?: string;
  /** false creates it deactivated. */
  active?: boolean;
}

/** What schedules.update changes: the fields given. */
export interface UpdateScheduleOptions {
  task?: string;
  cron?: string;
  timezone?: string;
  externalId?: string;
}

/** Filters of schedules.list. */
export interface ListSchedulesOptions extends Scope {
  task?: string;
  type?: Schedule["type"];
  limit?: number;
  cursor?: string;
}

/** Cron schedules of tasks: create, list, retrieve, update, activate, deactivate, delete. */
export class Schedules {
  readonly #t: Transport;
  readonly #scope: (s?: Scope) => { project: string; env: string };

  constructor(t: Transport, scope: (s?: Scope) => { project: string; env: string }) {
    this.#t = t;
    this.#scope = scope;
  }

  /** create makes an imperative schedule, or updates the one holding its deduplicationKey (needs schedules:manage). */
  create(options: CreateScheduleOptions): Promise<Schedule> {
    const { task, cron, timezone, externalId, deduplicationKey, active } = options;
    return this.#t.call("POST", "/v1/schedules", {
      query: this.#scope(options),
      body: { task, cron, timezone, externalId, deduplicationKey, active },
      idempotent: deduplicationKey !== undefined,
    });
  }

  /** list returns a page of schedules (needs schedules:read). */
  list(options: ListSchedulesOptions = {}): Promise<SchedulePage> {
    const { task, type, limit, cursor } = options;
    return this.#t.call("GET", "/v1/schedules", { query: { ...this.#scope(options), task, type, limit, cursor }, idempotent: true });
  }

  /** retrieve returns a schedule (needs schedules:read). */
  retrieve(id: string): Promise<Schedule> {
    return this.#t.call("GET", "/v1/schedules/{id}", { path: { id }, idempotent: true });
  }

  /** update changes an imperative schedule; a declarative one is a ConflictError (needs schedules:manage). */
  update(id: string, changes: UpdateScheduleOptions): Promise<Schedule> {
    return this.#t.call("PATCH", "/v1/schedules/{id}", { path: { id }, body: changes, idempotent: true });
  }

  /** activate turns a schedule on; its next tick is the first after now (needs schedules:manage). */
  activate(id: string): Promise<Schedule> {
    return this.#t.call("POST", "/v1/schedules/{id}/activate", { path: { id }, idempotent: true });
  }

  /** deactivate turns a schedule off (needs schedules:manage). */
  deactivate(id: string): Promise<Schedule> {
    return this.#t.call("POST", "/v1/schedules/{id}/deactivate", { path: { id }, idempotent: true });
  }

  /** del deletes an imperative schedule; a declarative one goes with the deploy that drops it (needs schedules:manage). */
  async del(id: string): Promise<void> {
    await this.#t.call("DELETE", "/v1/schedules/{id}", { path: { id }, idempotent: true });
  }
}
