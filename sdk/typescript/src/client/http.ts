import type { Answer, CallParams, Method, PathsWith } from "./api.js";
import { ConnectionError, HelmrApiError, apiError } from "./errors.js";
import { env, platform, sleep, type AbortSignalLike, type Fetch, type FetchResponse } from "./globals.js";

/** How the runtime client reaches the API. */
export interface ClientOptions {
  /** The control plane's URL; default HELMR_URL, else http://127.0.0.1:8480 (where helmr dev and helmr server listen by default). */
  baseURL?: string;
  /** An API key (hk_...) or the owner credential; default HELMR_API_KEY. */
  apiKey?: string;
  /**
   * How many times a request is retried after a 429 or 503 (any request:
   * the server did not act on it) or, for idempotent requests, after a
   * connection failure or another 5xx. Default 3.
   */
  maxRetries?: number;
  /** fetch to use (default: the global fetch). */
  fetch?: Fetch;
}

/** One request. */
export interface RequestOptions {
  query?: Record<string, string | number | undefined>;
  /** A JSON body. */
  body?: unknown;
  /** Bytes sent as the body instead (application/octet-stream). */
  bytes?: Uint8Array;
  headers?: Record<string, string>;
  /** Safe to send again after a connection failure or a 5xx. */
  idempotent?: boolean;
  signal?: AbortSignalLike;
}

/** Options of call, besides what the operation takes. */
export type CallOptions<M extends Method, P extends PathsWith<M>> = CallParams<M, P> & Omit<RequestOptions, "query" | "body">;

/** The control plane's default address (HELMR_ADDR of helmr dev and helmr server). */
export const defaultURL = "http://127.0.0.1:8480";

/** Transport sends requests with the credential, retrying as ClientOptions says. */
export class Transport {
  readonly baseURL: string;
  readonly #apiKey: string | undefined;
  readonly #maxRetries: number;
  readonly #fetch: Fetch;

  constructor(options: ClientOptions = {}) {
    this.baseURL = (options.baseURL ?? env("HELMR_URL") ?? defaultURL).replace(/\/+$/, "");
    this.#apiKey = options.apiKey ?? env("HELMR_API_KEY");
    this.#maxRetries = options.maxRetries ?? 3;
    const f = options.fetch ?? platform.fetch;
    if (f === undefined) throw new Error("@helmr/sdk: no fetch on this platform: pass options.fetch");
    this.#fetch = f;
  }

  url(path: string, query?: Record<string, string | number | undefined>): string {
    const q = Object.entries(query ?? {})
      .filter(([, v]) => v !== undefined && v !== "")
      .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`)
      .join("&");
    return this.baseURL + path + (q === "" ? "" : `?${q}`);
  }

  headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { ...extra };
    if (this.#apiKey !== undefined && this.#apiKey !== "") h.Authorization = `Bearer ${this.#apiKey}`;
    return h;
  }

  /**
   * call sends the operation of method on a path of the document (a
   * template such as "/v1/runs/{id}", filled from options.path) and returns
   * its JSON answer, typed as the document says (undefined for 204).
   */
  async call<M extends Method, P extends PathsWith<M>>(method: M, path: P, options: CallOptions<M, P>): Promise<Answer<M, P>> {
    const res = await this.callRaw(method, path, options);
    const text = await res.text();
    // The one place an answer's JSON gets its type: the document's.
    return (text === "" ? undefined : JSON.parse(text)) as Answer<M, P>;
  }

  /** callRaw is call without reading the answer: for bodies that are not JSON (bytes, event streams). */
  callRaw<M extends Method, P extends PathsWith<M>>(method: M, path: P, options: CallOptions<M, P>): Promise<FetchResponse> {
    // CallOptions, checked against the document at the call, seen as what send takes.
    const { path: params, ...rest } = options as RequestOptions & { path?: Record<string, string> };
    return this.send(method, expand(path, params), rest);
  }

  /** send sends one request and returns the answer of a 2xx status without reading it, else throws its error. */
  async send(method: string, path: string, options: RequestOptions = {}): Promise<FetchResponse> {
    const headers = this.headers(options.headers);
    let body: string | Uint8Array | undefined;
    if (options.bytes !== undefined) {
      headers["Content-Type"] = "application/octet-stream";
      body = options.bytes;
    } else if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const url = this.url(path, options.query);
    for (let attempt = 0; ; attempt++) {
      let failure: HelmrApiError | ConnectionError;
      try {
        const init = { method, headers, ...(body !== undefined ? { body } : {}), ...(options.signal ? { signal: options.signal } : {}) };
        const res = await this.#fetch(url, init);
        if (res.status < 400) return res;
        failure = apiError(res.status, await res.text(), retryAfter(res));
      } catch (err) {
        if (options.signal?.aborted) throw err;
        failure = new ConnectionError(`${method} ${url}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      if (attempt >= this.#maxRetries || !retryable(failure, options.idempotent === true)) throw failure;
      await sleep(delay(failure, attempt), options.signal);
    }
  }
}

/** expand fills a path template's {name} parts from params, escaped. */
export function expand(template: string, params: Record<string, string> | undefined): string {
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const v = params?.[name];
    if (v === undefined || v === "") throw new TypeError(`@helmr/sdk: ${template} needs ${name}`);
    return encodeURIComponent(v);
  });
}

/** retryable: 429 and 503 always; other 5xx and lost connections when the request is idempotent. */
export function retryable(err: HelmrApiError | ConnectionError, idempotent: boolean): boolean {
  if (err instanceof HelmrApiError) {
    if (err.status === 429 || err.status === 503) return true;
    return idempotent && err.status >= 500;
  }
  return idempotent;
}

/** delay is the server's Retry-After, else an exponential backoff with jitter. */
export function delay(err: HelmrApiError | ConnectionError, attempt: number): number {
  if (err instanceof HelmrApiError && err.retryAfterMs !== undefined) return err.retryAfterMs;
  const base = Math.min(250 * 2 ** attempt, 8000);
  return base / 2 + Math.random() * (base / 2);
}

/** retryAfter reads Retry-After (seconds, or an HTTP date) in milliseconds. */
export function retryAfter(res: FetchResponse): number | undefined {
  const v = res.headers.get("retry-after");
  if (v === null || v.trim() === "") return undefined;
  const secs = Number(v);
  if (Number.isFinite(secs) && secs >= 0) return Math.min(secs * 1000, 5 * 60_000);
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.min(Math.max(at - Date.now(), 0), 5 * 60_000);
}
