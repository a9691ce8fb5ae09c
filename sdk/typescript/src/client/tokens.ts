import type { Transport } from "./http.js";
import type { Scope, Waitpoint, WaitpointPage } from "./types.js";

/** Options of tokens.create. */
export interface CreateTokenOptions extends Scope {
  /** Times the token out this long after creation; absent: never. */
  timeoutSeconds?: number;
  /** A repeat with the same key returns the first token (without its callback URL). */
  idempotencyKey?: string;
  tags?: string[];
}

/** Filters of tokens.list. */
export interface ListTokensOptions extends Scope {
  status?: Waitpoint["status"];
  run?: string;
  tag?: string;
  limit?: number;
  cursor?: string;
}

/** Wait tokens (and human waits): create, list, retrieve, complete, cancel. */
export class Tokens {
  readonly #t: Transport;
  readonly #scope: (s?: Scope) => { project: string; env: string };

  constructor(t: Transport, scope: (s?: Scope) => { project: string; env: string }) {
    this.#t = t;
    this.#scope = scope;
  }

  /** create makes a token not tied to a run; only this answer carries its callbackUrl (needs tokens:create). */
  create(options: CreateTokenOptions = {}): Promise<Waitpoint> {
    const { timeoutSeconds, idempotencyKey, tags } = options;
    return this.#t.call("POST", "/v1/tokens", {
      query: this.#scope(options),
      body: { timeoutSeconds, idempotencyKey, tags },
      idempotent: idempotencyKey !== undefined,
    });
  }

  /** list returns a page of waitpoints (needs tokens:read). */
  list(options: ListTokensOptions = {}): Promise<WaitpointPage> {
    const { status, run, tag, limit, cursor } = options;
    return this.#t.call("GET", "/v1/tokens", { query: { ...this.#scope(options), status, run, tag, limit, cursor }, idempotent: true });
  }

  /** retrieve returns a waitpoint (needs tokens:read). */
  retrieve(id: string): Promise<Waitpoint> {
    return this.#t.call("GET", "/v1/tokens/{id}", { path: { id }, idempotent: true });
  }

  /**
   * complete answers a waiting token with data (needs tokens:complete).
   * The same data again is a no-op; other data is a ConflictError.
   */
  complete(id: string, data: unknown): Promise<Waitpoint> {
    return this.#t.call("POST", "/v1/tokens/{id}/complete", { path: { id }, body: { data: data ?? null }, idempotent: true });
  }

  /** cancel cancels a waiting token; the waiting task gets a canceled result (needs tokens:cancel). */
  cancel(id: string, reason?: string): Promise<Waitpoint> {
    return this.#t.call("POST", "/v1/tokens/{id}/cancel", { path: { id }, body: reason === undefined ? {} : { reason }, idempotent: true });
  }
}
