// The runtime's side of @helmr/sdk's wait errors (sdk/typescript/src/
// wait-errors.ts). The adapter does not import the SDK, and each deployed
// module bundles its own copy of it, so the errors thrown here carry their
// kind under a registered symbol; the SDK's WaitError, WaitTimeoutError and
// WaitRejectedError recognize it in `instanceof`.

/** The registered symbol under which a wait error carries its kind. */
export const WAIT_ERROR_BRAND = Symbol.for("helmr.waitError");

/** How a wait ended without an answer, as @helmr/sdk's WaitErrorKind. */
export type WaitErrorKind = "timeout" | "rejected";

/** A wait that ended without an answer (the adapter's side of @helmr/sdk's WaitError). */
export class WaitError extends Error {
  readonly kind: WaitErrorKind;

  constructor(kind: WaitErrorKind, message: string) {
    super(message);
    this.kind = kind;
    Object.defineProperty(this, WAIT_ERROR_BRAND, { value: kind, enumerable: false });
  }
}

/** The wait's timeout passed before anyone answered. */
export class WaitTimeoutError extends WaitError {
  override name = "WaitTimeoutError";

  constructor(message: string) {
    super("timeout", message);
  }
}

/** The person rejected the wait. */
export class WaitRejectedError extends WaitError {
  override name = "WaitRejectedError";
  readonly reason: string | undefined;

  constructor(reason: string | undefined, message: string) {
    super("rejected", message);
    this.reason = reason;
  }
}
