// Errors of the runtime client: one class per HTTP status the API answers
// with, all HelmrApiError (status, code, message), and ConnectionError when
// no answer came.

/** An error answer of the Helmr API ({"error": {"code", "message"}}). */
export class HelmrApiError extends Error {
  override name = "HelmrApiError";
  /** The HTTP status. */
  readonly status: number;
  /** The API's stable error code, such as "not_found" or "conflict". */
  readonly code: string;
  /** Details some errors carry (a deployment's problems). */
  readonly details: unknown;
  /** Retry-After of the answer, in milliseconds, if it had one. */
  readonly retryAfterMs: number | undefined;

  constructor(status: number, code: string, message: string, details?: unknown, retryAfterMs?: number) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfterMs = retryAfterMs;
  }
}

/** 400: the request is malformed or invalid. */
export class BadRequestError extends HelmrApiError {
  override name = "BadRequestError";
}
/** 401: no, or no valid, credential. */
export class UnauthorizedError extends HelmrApiError {
  override name = "UnauthorizedError";
}
/** 403: the credential lacks the grant or the project environment. */
export class ForbiddenError extends HelmrApiError {
  override name = "ForbiddenError";
}
/** 404: no such object (or one outside the credential's scope). */
export class NotFoundError extends HelmrApiError {
  override name = "NotFoundError";
}
/** 409: the object's state forbids it (a run that ended, a key reused with other data). */
export class ConflictError extends HelmrApiError {
  override name = "ConflictError";
}
/** 413: the request body is too large. */
export class PayloadTooLargeError extends HelmrApiError {
  override name = "PayloadTooLargeError";
}
/** 422: a deployment that does not build. */
export class UnprocessableEntityError extends HelmrApiError {
  override name = "UnprocessableEntityError";
}
/** 429: too many requests; retried after Retry-After. */
export class RateLimitError extends HelmrApiError {
  override name = "RateLimitError";
}
/** 5xx: the server failed (503: unavailable, retried after Retry-After). */
export class ServerError extends HelmrApiError {
  override name = "ServerError";
}

/** No answer: the connection failed or was cut. */
export class ConnectionError extends Error {
  override name = "ConnectionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

const byStatus: Record<number, typeof HelmrApiError> = {
  400: BadRequestError,
  401: UnauthorizedError,
  403: ForbiddenError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: UnprocessableEntityError,
  429: RateLimitError,
};

/** apiError builds the error class of an answer's status from its body text. */
export function apiError(status: number, bodyText: string, retryAfterMs?: number): HelmrApiError {
  let code = "http_" + status;
  let message = bodyText.trim().slice(0, 500) || `HTTP ${status}`;
  let details: unknown;
  try {
    const body = JSON.parse(bodyText) as { error?: { code?: unknown; message?: unknown; details?: unknown } };
    if (typeof body?.error?.code === "string") code = body.error.code;
    if (typeof body?.error?.message === "string") message = body.error.message;
    details = body?.error?.details;
  } catch {
    // not JSON: keep the text
  }
  return errorOf(status, code, message, details, retryAfterMs);
}

/** errorOf builds the error class of status (an answer's, or a stream's error event's). */
export function errorOf(status: number, code: string, message: string, details?: unknown, retryAfterMs?: number): HelmrApiError {
  const Class = byStatus[status] ?? (status >= 500 ? ServerError : HelmrApiError);
  return new Class(status, code, message, details, retryAfterMs);
}
