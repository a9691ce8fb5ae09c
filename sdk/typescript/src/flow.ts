// Flow control a task declares: how failed runs are retried, and the queue
// (with its concurrency limit) its runs wait in.

import { describe } from "./validate.js";

/** How a failed run is tried again (see the README's Retries). */
export interface RetryOptions {
  /** Attempts in all, the first included (1 to 100). */
  maxAttempts: number;
  /** Each wait is the previous one times factor (default 2). */
  factor?: number;
  /** The first wait, in milliseconds (default 1000). */
  minTimeoutInMs?: number;
  /** The longest wait, in milliseconds (default 60000). */
  maxTimeoutInMs?: number;
  /** Scale each wait by a random factor in [1, 2). */
  randomize?: boolean;
  /** Also retry a run that ran past its maxDuration. */
  retryOnTimeout?: boolean;
}

/** The manifest form of a retry policy (what the control plane keeps). */
export interface RetryManifest {
  maxAttempts: number;
  factor?: number;
  minTimeoutInMs?: number;
  maxTimeoutInMs?: number;
  randomize?: boolean;
  retryOnTimeout?: boolean;
}

/** A named queue: at most concurrencyLimit of its runs run at once. */
export interface Queue {
  readonly name: string;
  readonly concurrencyLimit?: number;
}

const queueName = /^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$/;

/** queue declares a queue that several tasks can share. */
export function queue(options: { name: string; concurrencyLimit?: number }): Queue {
  return Object.freeze(queueManifest("queue()", options));
}

/** queueManifest checks a queue declaration. */
export function queueManifest(where: string, q: unknown): { name: string; concurrencyLimit?: number } {
  if (q === null || typeof q !== "object") {
    throw new TypeError(`${where} queue must be { name, concurrencyLimit } or queue(...), got ${describe(q)}`);
  }
  const { name, concurrencyLimit } = q as { name?: unknown; concurrencyLimit?: unknown };
  if (typeof name !== "string" || !queueName.test(name)) {
    throw new TypeError(`${where} queue name must be 1 to 128 letters, digits and _.:/- (starting with a letter or digit), got ${describe(name)}`);
  }
  if (concurrencyLimit !== undefined && (!Number.isInteger(concurrencyLimit) || (concurrencyLimit as number) < 0 || (concurrencyLimit as number) > 100000)) {
    throw new TypeError(`${where} queue concurrencyLimit must be a whole number from 0 (no limit) to 100000, got ${describe(concurrencyLimit)}`);
  }
  return concurrencyLimit ? { name, concurrencyLimit: concurrencyLimit as number } : { name };
}

/** retryManifest checks a retry policy. */
export function retryManifest(where: string, r: unknown): RetryManifest {
  if (r === null || typeof r !== "object") {
    throw new TypeError(`${where} retry must be { maxAttempts, ... }, got ${describe(r)}`);
  }
  const o = r as Record<string, unknown>;
  const int = (k: string, lo: number, hi: number) => {
    const v = o[k];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) {
      throw new TypeError(`${where} retry.${k} must be a whole number from ${lo} to ${hi}, got ${describe(v)}`);
    }
    return v;
  };
  const maxAttempts = int("maxAttempts", 1, 100);
  if (maxAttempts === undefined) throw new TypeError(`${where} retry.maxAttempts is required`);
  const out: RetryManifest = { maxAttempts };
  const minT = int("minTimeoutInMs", 0, 86400000);
  const maxT = int("maxTimeoutInMs", 0, 86400000);
  if (minT !== undefined) out.minTimeoutInMs = minT;
  if (maxT !== undefined) out.maxTimeoutInMs = maxT;
  if (o.factor !== undefined) {
    if (typeof o.factor !== "number" || o.factor < 1 || o.factor > 10) {
      throw new TypeError(`${where} retry.factor must be from 1 to 10, got ${describe(o.factor)}`);
    }
    out.factor = o.factor;
  }
  for (const k of ["randomize", "retryOnTimeout"] as const) {
    if (o[k] !== undefined) {
      if (typeof o[k] !== "boolean") throw new TypeError(`${where} retry.${k} must be a boolean, got ${describe(o[k])}`);
      if (o[k]) out[k] = true;
    }
  }
  for (const k of Object.keys(o)) {
    if (!["maxAttempts", "factor", "minTimeoutInMs", "maxTimeoutInMs", "randomize", "retryOnTimeout"].includes(k)) {
      throw new TypeError(`${where} retry has no option ${JSON.stringify(k)}`);
    }
  }
  return out;
}

const ABORT = Symbol.for("helmr.AbortTaskRunError");

/**
 * AbortTaskRunError fails the run at once, without the retries its policy
 * would give it.
 */
export class AbortTaskRunError extends Error {
  readonly [ABORT] = true;
  constructor(message: string) {
    super(message);
    this.name = "AbortTaskRunError";
  }
  /** Works across copies of the SDK (the task's bundle and the adapter). */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[ABORT] === true;
  }
}
