// schedules.task declares a task that runs on a cron schedule, as
// Trigger.dev's scheduled tasks do. Deploying creates, updates or removes
// its declarative schedule; the API and `helmr schedules` make imperative
// ones of any deployed task.

import { TASK_BRAND, TASK_BRAND_VERSION, type TaskBrand } from "./brand.js";
import type { TaskContext } from "./context.js";
import type { ScheduleManifest, TaskDeclaration } from "./manifest-types.js";
import { task, type Task, type TaskOptions } from "./task.js";
import { describe } from "./validate.js";

/** What a scheduled run receives: the tick it is for, and the schedule. */
export interface ScheduledTaskPayload {
  /** DECLARATIVE (from the task's cron) or IMPERATIVE (API, CLI). */
  type: "DECLARATIVE" | "IMPERATIVE";
  /** The tick this run is for. */
  timestamp: Date;
  /** The tick of the schedule's previous run; absent for its first. */
  lastTimestamp?: Date;
  /** The IANA zone the cron is read in. */
  timezone: string;
  scheduleId: string;
  /** The external id an imperative schedule was created with. */
  externalId?: string;
  /** The next ticks after this one. */
  upcoming: Date[];
}

/** A cron expression: five fields, six with leading seconds, or @daily and the like. */
export type CronExpression = string;

/** What schedules.task takes: task() options whose run gets a ScheduledTaskPayload. */
export interface ScheduledTaskOptions<R> extends Omit<TaskOptions<ScheduledTaskPayload, R>, "run"> {
  /**
   * The declarative schedule: a cron expression in UTC, or one with its
   * IANA time zone. Absent: the task only runs on imperative schedules.
   */
  cron?: CronExpression | { pattern: CronExpression; timezone?: string };
  /** The run logic; the payload's times are Dates. */
  run: (payload: ScheduledTaskPayload, ctx: TaskContext) => Promise<R> | R;
}

/** The wire form of a scheduled payload (times as ISO strings). */
interface WirePayload {
  type: ScheduledTaskPayload["type"];
  timestamp: string;
  lastTimestamp?: string;
  timezone: string;
  scheduleId: string;
  externalId?: string;
  upcoming?: string[];
}

function fromWire(p: WirePayload): ScheduledTaskPayload {
  if (p === null || typeof p !== "object" || typeof p.timestamp !== "string" || typeof p.scheduleId !== "string") {
    throw new TypeError(`a scheduled task's payload must come from a schedule, got ${describe(p)}`);
  }
  return {
    type: p.type,
    timestamp: new Date(p.timestamp),
    ...(p.lastTimestamp !== undefined ? { lastTimestamp: new Date(p.lastTimestamp) } : {}),
    timezone: p.timezone,
    scheduleId: p.scheduleId,
    ...(p.externalId !== undefined ? { externalId: p.externalId } : {}),
    upcoming: (p.upcoming ?? []).map((t) => new Date(t)),
  };
}

function scheduleOf(id: string, cron: ScheduledTaskOptions<unknown>["cron"]): ScheduleManifest | undefined {
  if (cron === undefined) return undefined;
  const [pattern, timezone] = typeof cron === "string" ? [cron, undefined] : [cron?.pattern, cron?.timezone];
  if (typeof pattern !== "string" || pattern.trim() === "") {
    throw new TypeError(`task "${id}" cron must be a cron expression or { pattern, timezone }, got ${describe(cron)}`);
  }
  if (timezone !== undefined && (typeof timezone !== "string" || timezone === "")) {
    throw new TypeError(`task "${id}" cron timezone must be an IANA zone name such as "Europe/Paris", got ${describe(timezone)}`);
  }
  return { cron: pattern.trim(), ...(timezone !== undefined ? { timezone } : {}) };
}

/**
 * task declares a scheduled task: a task whose run gets a
 * ScheduledTaskPayload, with an optional declarative cron schedule that
 * deploying keeps in step (the server checks the expression and zone).
 */
function scheduledTask<R = unknown>(options: ScheduledTaskOptions<R>): Task<ScheduledTaskPayload, R> {
  const { cron, run, ...rest } = options;
  if (typeof run !== "function") {
    throw new TypeError(`task "${String(options.id)}" run must be a function: a scheduled task runs, got ${describe(run)}`);
  }
  const wrapped = (payload: unknown, ctx: TaskContext) => run(fromWire(payload as WirePayload), ctx);
  const base = task<ScheduledTaskPayload, R>({ ...rest, run: wrapped as never });
  const schedule = scheduleOf(base.id, cron);
  const declaration: TaskDeclaration = { ...base[TASK_BRAND].manifest(), ...(schedule ? { schedule } : {}) };
  const json = JSON.stringify(declaration);
  const brand: TaskBrand = Object.freeze({
    version: TASK_BRAND_VERSION,
    manifest: () => JSON.parse(json) as TaskDeclaration,
  });
  return Object.freeze({ ...base, [TASK_BRAND]: brand });
}

/** schedules groups the scheduling API: schedules.task(...). */
export const schedules = Object.freeze({ task: scheduledTask });
