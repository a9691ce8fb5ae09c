import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { WaitError, WaitRejectedError, WaitTimeoutError } from "../src/index.js";

/** foreign makes an error as another copy of the SDK, or the runtime, does: an Error carrying the brand. */
function foreign(kind: string, extra: Record<string, unknown> = {}): Error {
  const err = Object.assign(new Error("from elsewhere"), extra);
  Object.defineProperty(err, Symbol.for("helmr.waitError"), { value: kind });
  return err;
}

describe("wait errors", () => {
  it("are instances of their class and of WaitError, not of the other", () => {
    const timeout = new WaitTimeoutError();
    const rejected = new WaitRejectedError("not now");
    assert.deepStrictEqual(
      [timeout instanceof WaitTimeoutError, timeout instanceof WaitError, timeout instanceof Error, timeout instanceof WaitRejectedError],
      [true, true, true, false],
    );
    assert.deepStrictEqual(
      [rejected instanceof WaitRejectedError, rejected instanceof WaitError, rejected instanceof WaitTimeoutError],
      [true, true, false],
    );
    assert.deepStrictEqual([timeout.name, timeout.kind, timeout.message], ["WaitTimeoutError", "timeout", "the wait timed out"]);
    assert.deepStrictEqual([rejected.name, rejected.kind, rejected.reason, rejected.message], ["WaitRejectedError", "rejected", "not now", "the wait was rejected: not now"]);
    assert.equal(new WaitRejectedError().reason, undefined);
  });

  it("recognize errors branded elsewhere by their kind", () => {
    assert.deepStrictEqual([foreign("timeout") instanceof WaitTimeoutError, foreign("timeout") instanceof WaitError, foreign("timeout") instanceof WaitRejectedError], [true, true, false]);
    assert.deepStrictEqual([foreign("rejected") instanceof WaitRejectedError, foreign("rejected") instanceof WaitError, foreign("rejected") instanceof WaitTimeoutError], [true, true, false]);
  });

  it("do not recognize look-alikes", () => {
    assert.ok(!(foreign("other") instanceof WaitError), "an unknown kind");
    assert.ok(!(new Error("x") instanceof WaitError), "a plain Error");
    assert.ok(!(Object.assign(new Error("x"), { name: "WaitTimeoutError", kind: "timeout" }) instanceof WaitTimeoutError), "a name alone");
    assert.ok(!({ [Symbol.for("helmr.waitError")]: "timeout" } instanceof WaitError), "a branded non-Error");
    assert.ok(!((null as unknown) instanceof WaitError), "null");
  });

  it("match a subclass of theirs by prototype only", () => {
    class Late extends WaitTimeoutError {}
    assert.ok(new Late() instanceof Late && new Late() instanceof WaitTimeoutError && new Late() instanceof WaitError);
    assert.ok(!(new WaitTimeoutError() instanceof Late));
    assert.ok(!(foreign("timeout") instanceof Late));
  });
});
