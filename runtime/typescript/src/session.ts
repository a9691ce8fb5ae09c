import { randomUUID } from "node:crypto";

import type { Requester } from "./context.js";

// ctx.session and ctx.metadata: requests to the worker (session.input.next,
// session.output.append, metadata.set); see protocol.ts.

/** ctx.session, as @helmr/sdk's Session. */
export interface AdapterSession {
  input: AsyncIterable<unknown>;
  output: { append(data: unknown, options?: { idempotencyKey?: string }): Promise<{ seq: number }> };
}

/** ctx.metadata, as @helmr/sdk's Metadata. */
export interface AdapterMetadata {
  set(key: string, value: unknown): Promise<void>;
  get(key: string): unknown;
}

interface Record {
  seq: number;
  data: unknown;
}

/**
 * createSession builds ctx.session over ask. Every iteration of input reads
 * on from where the last one stopped: a record is yielded once. settle
 * resolves once every output append under way is answered (the adapter
 * waits for it before it reports the run's result).
 */
export function createSession(ask: Requester): { session: AdapterSession; settle(): Promise<void> } {
  const buffered: Record[] = [];
  let cursor = 0; // seq of the last record fetched
  let fetching: Promise<void> | undefined;
  const fetchMore = (): Promise<void> => {
    fetching ??= (async () => {
      try {
        const got = (await ask("session.input.next", { after: cursor })) as { records?: unknown } | null;
        const records = got?.records;
        if (!Array.isArray(records)) throw new Error(`ctx.session.input: malformed answer from the worker: ${JSON.stringify(got)}`);
        for (const r of records as Array<Partial<Record>>) {
          if (typeof r?.seq !== "number" || r.seq <= cursor) continue; // never twice
          buffered.push({ seq: r.seq, data: r.data });
          cursor = r.seq;
        }
      } finally {
        fetching = undefined;
      }
    })();
    return fetching;
  };
  const input: AsyncIterable<unknown> = {
    [Symbol.asyncIterator](): AsyncIterator<unknown> {
      let done = false;
      return {
        async next(): Promise<IteratorResult<unknown>> {
          while (!done) {
            const r = buffered.shift();
            if (r !== undefined) return { done: false, value: r.data };
            await fetchMore();
          }
          return { done: true, value: undefined };
        },
        async return(): Promise<IteratorResult<unknown>> {
          done = true;
          return { done: true, value: undefined };
        },
      };
    },
  };

  const pending = new Set<Promise<unknown>>();
  const append = async (data: unknown, options: { idempotencyKey?: string } = {}): Promise<{ seq: number }> => {
    const json = toJSON(data, "ctx.session.output.append: data");
    const key = options.idempotencyKey ?? randomUUID();
    if (typeof key !== "string" || key === "" || key.length > 256) {
      throw new TypeError("ctx.session.output.append: idempotencyKey must be a string of 1-256 characters");
    }
    const p = ask("session.output.append", { id: key, data: json });
    pending.add(p);
    try {
      const got = (await p) as { seq?: unknown } | null;
      if (typeof got?.seq !== "number") throw new Error(`ctx.session.output.append: malformed answer from the worker: ${JSON.stringify(got)}`);
      return { seq: got.seq };
    } finally {
      pending.delete(p);
    }
  };
  return {
    session: Object.freeze({ input, output: Object.freeze({ append }) }),
    settle: async () => {
      await Promise.allSettled([...pending]);
    },
  };
}

/** createMetadata builds ctx.metadata: set stores a key with the run; get reads what this run set. */
export function createMetadata(ask: Requester): AdapterMetadata {
  const values = new Map<string, unknown>();
  return Object.freeze({
    async set(key: string, value: unknown): Promise<void> {
      if (typeof key !== "string" || key === "" || key.length > 128) throw new TypeError("ctx.metadata.set: key must be a string of 1-128 characters");
      const json = toJSON(value, `ctx.metadata.set(${JSON.stringify(key)}): value`);
      await ask("metadata.set", { key, value: json });
      values.set(key, json);
    },
    get(key: string): unknown {
      return structuredClone(values.get(key));
    },
  });
}

/** toJSON returns value as JSON would carry it, refusing what JSON cannot. */
function toJSON(value: unknown, what: string): unknown {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new TypeError(`${what} is not JSON-serializable: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (text === undefined) throw new TypeError(`${what} is not JSON-serializable: a ${typeof value} has no JSON form`);
  return JSON.parse(text) as unknown;
}
