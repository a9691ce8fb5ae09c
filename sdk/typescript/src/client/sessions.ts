import type { AbortSignalLike } from "./globals.js";
import { newKey } from "./globals.js";
import type { Transport } from "./http.js";
import { dataOf, follow } from "./sse.js";
import type { SessionRecord } from "./types.js";

/** Options of an append. */
export interface SessionAppendOptions {
  /** Makes the append idempotent: retries store it once. Default: a fresh key per call. */
  idempotencyKey?: string;
  signal?: AbortSignalLike;
}

/** Options of a read. */
export interface SessionReadOptions {
  /** Resume after this seq (the last record you saw); default: from the first record. */
  after?: number;
  signal?: AbortSignalLike;
}

/** A run's session streams: send input, append output, read either over SSE. */
export class Sessions {
  readonly #t: Transport;

  constructor(t: Transport) {
    this.#t = t;
  }

  /** sendInput appends data to the run's input, which the task reads with for await (needs session-input:send). */
  sendInput(runId: string, data: unknown, options: SessionAppendOptions = {}): Promise<SessionRecord> {
    return this.#append(runId, "input", data, options);
  }

  /** appendOutput appends data to the run's output from outside the task (needs session-output:append). */
  appendOutput(runId: string, data: unknown, options: SessionAppendOptions = {}): Promise<SessionRecord> {
    return this.#append(runId, "output", data, options);
  }

  /**
   * readOutput yields the run's output records in order, waiting for more,
   * until the run ended and every record was read (needs
   * session-streams:read). A dropped connection is resumed after the last
   * record yielded: none is lost or repeated.
   */
  readOutput(runId: string, options: SessionReadOptions = {}): AsyncGenerator<SessionRecord> {
    return this.#read(runId, "output", options);
  }

  /** readInput is readOutput for the run's input. */
  readInput(runId: string, options: SessionReadOptions = {}): AsyncGenerator<SessionRecord> {
    return this.#read(runId, "input", options);
  }

  #append(runId: string, stream: "input" | "output", data: unknown, options: SessionAppendOptions): Promise<SessionRecord> {
    const key = options.idempotencyKey ?? newKey();
    return this.#t.call("POST", `/v1/runs/{id}/session/${stream}`, {
      path: { id: runId },
      body: { data: data ?? null, idempotencyKey: key },
      idempotent: true,
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  async *#read(runId: string, stream: "input" | "output", options: SessionReadOptions): AsyncGenerator<SessionRecord> {
    let last = options.after ?? 0;
    const path = `/v1/runs/${encodeURIComponent(runId)}/session/${stream}/stream`;
    const evs = follow(this.#t, path, {
      ...(last > 0 ? { lastEventId: String(last) } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    for await (const ev of evs) {
      if (ev.event !== "record") continue;
      const rec = dataOf("record", ev.data);
      if (rec.seq <= last) continue; // never twice, whatever the server resends
      last = rec.seq;
      yield rec;
    }
  }
}
