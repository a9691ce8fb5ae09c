import type { Schemas } from "./api.js";
import { ConnectionError, HelmrApiError } from "./errors.js";
import { platform, sleep, type AbortSignalLike } from "./globals.js";
import { delay, retryable, type Transport } from "./http.js";

/**
 * The data of each named event the API streams, by the document's schemas
 * (SSE bodies are text/event-stream, which the document cannot type).
 */
export interface EventData {
  record: Schemas["Record"];
  output: Schemas["ExecOutput"];
  result: Schemas["ExecResult"];
  error: Schemas["ExecStreamError"];
}

/** dataOf parses the data of an event named name as the document types it. */
export function dataOf<E extends keyof EventData>(_name: E, data: string): EventData[E] {
  return JSON.parse(data) as EventData[E];
}

/** One server-sent event. */
export interface ServerSentEvent {
  id?: string;
  event: string;
  data: string;
}

/**
 * events reads one SSE connection's events as they arrive; it ends when the
 * body does.
 */
export async function* events(body: { getReader(): { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(): Promise<void> } }): AsyncGenerator<ServerSentEvent> {
  const reader = body.getReader();
  const decoder = new platform.TextDecoder("utf-8");
  let buf = "";
  let ev: ServerSentEvent = { event: "message", data: "" };
  let hasData = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (hasData || ev.event !== "message") yield ev;
          ev = { event: "message", data: "" };
          hasData = false;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") ev.event = value;
        else if (field === "id") ev.id = value;
        else if (field === "data") {
          ev.data = hasData ? `${ev.data}\n${value}` : value;
          hasData = true;
        }
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** Options of follow. */
export interface FollowOptions {
  /** Resume after this event id (sent as Last-Event-ID). */
  lastEventId?: string;
  signal?: AbortSignalLike;
  /** Reconnections after failures in a row before giving up (default 10). */
  maxReconnects?: number;
}

/**
 * follow reads an SSE stream until its "end" event, reconnecting with
 * Last-Event-ID after the last event it yielded whenever the connection
 * drops (after the server's Retry-After, if it sent one): nothing is lost
 * or repeated.
 */
export async function* follow(t: Transport, path: string, options: FollowOptions = {}): AsyncGenerator<ServerSentEvent> {
  let last = options.lastEventId;
  let failures = 0;
  const max = options.maxReconnects ?? 10;
  for (;;) {
    let failure: HelmrApiError | ConnectionError;
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (last !== undefined) headers["Last-Event-ID"] = last;
      const res = await t.send("GET", path, { headers, idempotent: true, ...(options.signal ? { signal: options.signal } : {}) });
      if (res.body === null) throw new ConnectionError(`GET ${path}: no body`);
      for await (const ev of events(res.body)) {
        if (ev.event === "end") return;
        if (ev.id !== undefined) last = ev.id;
        failures = 0;
        yield ev;
      }
      failure = new ConnectionError(`GET ${path}: the stream closed before its end`);
    } catch (err) {
      if (options.signal?.aborted) throw err;
      if (!(err instanceof HelmrApiError || err instanceof ConnectionError)) {
        failure = new ConnectionError(`GET ${path}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      } else {
        failure = err;
      }
    }
    if (failures >= max || !retryable(failure, true) || (failure instanceof HelmrApiError && failure.status < 500 && failure.status !== 429)) {
      throw failure;
    }
    await sleep(delay(failure, failures), options.signal);
    failures++;
  }
}
