// The errors a wait throws when it ends without an answer. The guest adapter
// (runtime/typescript) throws them, and it does not import the SDK; each
// deployed module bundles its own copy of the SDK besides. So `instanceof`
// cannot rest on one class's identity: a wait error carries its kind under a
// registered symbol (Symbol.for), and these classes recognize any error
// carrying it, whichever copy made it.

/** The registered symbol under which a wait error carries its kind. */
export const WAIT_ERROR_BRAND: unique symbol = Symbol.for("helmr.waitError");

/** How a wait ended without an answer. */
export type WaitErrorKind = "timeout" | "rejected";

/**
 * WaitError is what ctx.wait.human throws when the wait ends without an
 * answer: a WaitTimeoutError or a WaitRejectedError. Catch it to handle
 * both; `err instanceof WaitError` holds for the errors the runtime throws.
 */
export abstract class WaitError extends Error {
  /** How the wait ended. */
  abstract readonly kind: WaitErrorKind;

  /**
   * instanceof: true for an instance (of this copy of the SDK) and, for the
   * SDK's own classes, for any error carrying the brand of a fitting kind
   * (the runtime's, another bundle's).
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    const want = brandedKinds.get(this);
    const got = waitErrorKind(value);
    return want !== undefined && got !== undefined && (want === "any" || want === got);
  }
}

/** WaitTimeoutError: the wait's timeout passed before anyone answered. */
export class WaitTimeoutError extends WaitError {
  override name = "WaitTimeoutError";
  readonly kind = "timeout";
  declare readonly [WAIT_ERROR_BRAND]: "timeout";

  constructor(message = "the wait timed out") {
    super(message);
    brand(this, "timeout");
  }
}

/** WaitRejectedError: the person rejected the wait (helmr reject RUN --reason ...). */
export class WaitRejectedError extends WaitError {
  override name = "WaitRejectedError";
  readonly kind = "rejected";
  /** The reason the person gave, if any. */
  readonly reason: string | undefined;
  declare readonly [WAIT_ERROR_BRAND]: "rejected";

  constructor(reason?: string, message = reason ? `the wait was rejected: ${reason}` : "the wait was rejected") {
    super(message);
    this.reason = reason;
    brand(this, "rejected");
  }
}

/** Which kinds each of the SDK's classes recognizes by brand; a subclass of them matches by prototype only. */
const brandedKinds = new Map<unknown, WaitErrorKind | "any">([
  [WaitError, "any"],
  [WaitTimeoutError, "timeout"],
  [WaitRejectedError, "rejected"],
]);

function brand(err: Error, kind: WaitErrorKind): void {
  Object.defineProperty(err, WAIT_ERROR_BRAND, { value: kind, enumerable: false });
}

/** waitErrorKind returns the kind a value is branded with, if it is a branded Error. */
function waitErrorKind(value: unknown): WaitErrorKind | undefined {
  if (!(value instanceof Error)) return undefined;
  const kind = (value as { [WAIT_ERROR_BRAND]?: unknown })[WAIT_ERROR_BRAND];
  return kind === "timeout" || kind === "rejected" ? kind : undefined;
}
